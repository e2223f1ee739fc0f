import { COORDINATOR_TOOLS } from './team/tools';
import { MEMBER_MESSAGE_PURPOSES } from './team/authority';
import { ORCHESTRATOR_TOOLS } from './orchestrator/tools';
import type { ToolDefinition, ToolProfile } from '../contract/tools';

const bashTool: ToolDefinition = {
  name: 'bash',
  description:
    'Run a bash command in your worktree (cwd is the worktree root). Returns exit code, stdout and stderr; ' +
    'long output is truncated and long runs are stopped.',
  parameters: {
    type: 'object',
    properties: {
      command: { type: 'string', description: 'The command line, run with bash -c.' },
      timeout_seconds: { type: 'number', description: 'Optional time limit, capped by the worker.' },
    },
    required: ['command'],
    additionalProperties: false,
  },
};

export const readFileTool: ToolDefinition = {
  name: 'read_file',
  description: 'Read a text file from your worktree. Paths are relative to the worktree root.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' } },
    required: ['path'],
    additionalProperties: false,
  },
};

export const writeFileTool: ToolDefinition = {
  name: 'write_file',
  description: 'Create or replace a text file in your worktree. Parent directories are created.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' }, content: { type: 'string' } },
    required: ['path', 'content'],
    additionalProperties: false,
  },
};

const gitStatusTool: ToolDefinition = {
  name: 'git_status',
  description: 'Show the git status of your worktree (branch, staged, modified, untracked files).',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
};

const gitDiffTool: ToolDefinition = {
  name: 'git_diff',
  description: 'Show the diff of your worktree against HEAD (or of the staged changes with staged=true).',
  parameters: {
    type: 'object',
    properties: { staged: { type: 'boolean' }, path: { type: 'string' } },
    additionalProperties: false,
  },
};

const gitCommitTool: ToolDefinition = {
  name: 'git_commit',
  description: 'Stage all changes in your worktree (or only `paths`) and commit them on your branch.',
  parameters: {
    type: 'object',
    properties: {
      message: { type: 'string' },
      paths: { type: 'array', items: { type: 'string' } },
    },
    required: ['message'],
    additionalProperties: false,
  },
};

/** What a child session's model is offered. */
export const CHILD_TOOLS: readonly ToolDefinition[] = [bashTool, readFileTool, writeFileTool, gitStatusTool, gitDiffTool, gitCommitTool];

/**
 * A team Member's message to its Coordinator (invariant 16): about the task it is working on now, for one of the
 * listed purposes. The Inbox refuses anything else (typed), and only an accepted message wakes the Coordinator.
 */
const memberMessageTool: ToolDefinition = {
  name: 'org_send_message',
  description:
    'Write to your Coordinator about the task you are working on now: a blocker, a decision you need, a material ' +
    'change, a risk, or a reply it asked for. It wakes the Coordinator; anything else, put in your task summary.',
  parameters: {
    type: 'object',
    properties: {
      related_task_id: { type: 'string', description: 'The id of the task you are working on now (your brief starts "Task <id>:").' },
      purpose: { type: 'string', enum: [...MEMBER_MESSAGE_PURPOSES] },
      text: { type: 'string', description: 'What the Coordinator needs to know or decide.' },
    },
    required: ['related_task_id', 'purpose', 'text'],
    additionalProperties: false,
  },
};

/** What a team Member's session is offered: a child's tools and the message to its Coordinator. */
const MEMBER_TOOLS: readonly ToolDefinition[] = [...CHILD_TOOLS, memberMessageTool];

/** The definitions each profile is offered: what its model sees, and all a session of it may execute. */
export const TOOL_PROFILES: { readonly [P in ToolProfile]: readonly ToolDefinition[] } = {
  child: CHILD_TOOLS,
  member: MEMBER_TOOLS,
  orchestrator: ORCHESTRATOR_TOOLS,
  coordinator: COORDINATOR_TOOLS,
};
