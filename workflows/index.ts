export { childSession } from './session/workflow';
export { orchestratorSession } from './orchestrator/workflow';
export { teamRun } from './team/workflow';
export { teamTaskExecution } from './team/execution';
export { hostPreflight } from './preflight';
