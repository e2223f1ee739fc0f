export { childSession } from './session/workflow';
