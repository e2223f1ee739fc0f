/**
 * The Coordinator's tools as the model sees them (invariant 12): built from the one allowlist of names in
 * `authority.ts`, so the schema offered, the executor and the store agree. Orchestration only: no bash, no file
 * writes, no tests, no browser, no generic delegate, no sleep, no waiting on output, no message to itself.
 */
import type { ToolDefinition } from '../../contract/tools';
import { COORDINATOR_TOOL_NAMES, MEMBER_MESSAGE_PURPOSES, type CoordinatorToolName } from './authority';

const TASK_ID = { type: 'string', description: 'A task id from task_list.' };
const MEMBER = { type: 'string', description: 'A member id of this team (e.g. implementer).' };
const none = { type: 'object', properties: {}, additionalProperties: false };

const DEFINITIONS: Record<CoordinatorToolName, Omit<ToolDefinition, 'name'>> = {
  task_list: {
    description:
      'The board: every task (id, title, owner, status, replaces, output) and completion_candidate.state. Returns no_new_work_facts when nothing changed since you last read it.',
    parameters: none,
  },
  task_get: {
    description: 'One task with its output and cancel reason.',
    parameters: { type: 'object', properties: { taskId: TASK_ID }, required: ['taskId'], additionalProperties: false },
  },
  task_create: {
    description:
      'Add a task to the board (pending); give an owner to assign it at once. To retry failed work, name the failed task in replaces: the new task carries its scope.',
    parameters: {
      type: 'object',
      properties: {
        taskId: { type: 'string', description: 'A short id, unique in this team (e.g. t1, implement-evaluator).' },
        title: { type: 'string' },
        description: { type: 'string', description: 'Everything the member needs to do the task.' },
        owner: MEMBER,
        replaces: { type: 'string', description: 'The id of a failed task this one replaces (optional).' },
      },
      required: ['taskId', 'title', 'description'],
      additionalProperties: false,
    },
  },
  task_assign: {
    description: 'Give a pending task to a member.',
    parameters: { type: 'object', properties: { taskId: TASK_ID, owner: MEMBER }, required: ['taskId', 'owner'], additionalProperties: false },
  },
  task_update: {
    description: "Change a pending or in-progress task's title or description.",
    parameters: {
      type: 'object',
      properties: { taskId: TASK_ID, title: { type: 'string' }, description: { type: 'string' } },
      required: ['taskId'],
      additionalProperties: false,
    },
  },
  plan_approve: {
    description: 'Approve the plan on the board: assigned pending tasks start with their owners.',
    parameters: none,
  },
  org_send_message: {
    description: 'A message to one member, tied to a task it works on.',
    parameters: {
      type: 'object',
      properties: {
        memberId: MEMBER,
        relatedTaskId: TASK_ID,
        purpose: { type: 'string', enum: [...MEMBER_MESSAGE_PURPOSES] },
        text: { type: 'string' },
      },
      required: ['memberId', 'relatedTaskId', 'text'],
      additionalProperties: false,
    },
  },
  user_reply: {
    description: 'Tell the user something (a question, a status).',
    parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'], additionalProperties: false },
  },
  org_run_complete: {
    description: 'Ask for the run to be certified delivered. Succeeds only when every task is closed with evidence.',
    parameters: { type: 'object', properties: { summary: { type: 'string' } }, required: ['summary'], additionalProperties: false },
  },
};

export const COORDINATOR_TOOLS: readonly ToolDefinition[] = COORDINATOR_TOOL_NAMES.map((name) => ({ name, ...DEFINITIONS[name] }));
