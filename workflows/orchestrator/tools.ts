/**
 * The orchestrator's tools as the model sees them (invariant 5 and issue 8, item 4): names, descriptions and JSON
 * Schemas, as data. The workflow executes them against its ledger; `session-call.ts` parses what a model sends.
 */
import type { ToolDefinition } from '../../contract/tools';

const SESSION_ID = { type: 'string', description: 'The child session id, as the roster lists it.' };

const sessionTool: ToolDefinition = {
  name: 'session',
  description:
    'Work with your child sessions. operation "send" relays a task to the child that owns its topic (an idle child ' +
    'resumes with its history); "create" starts a child for a topic none owns (a topic that matches an existing ' +
    'child routes to it); "list" shows the roster; "status" shows one child.',
  parameters: {
    type: 'object',
    properties: {
      operation: { type: 'string', enum: ['create', 'send', 'list', 'status'] },
      args: {
        type: 'object',
        description:
          'create: {title, task, agent?, topic?, routingDescription?, routingAliases?, includeContext? | context?}; send: {sessionID, task}; ' +
          'list: {}; status: {sessionID}.',
        properties: {
          sessionID: SESSION_ID,
          title: { type: 'string', description: 'create: one line naming what the child owns.' },
          task: { type: 'string', description: 'create/send: what the child should do now, with everything it needs.' },
          agent: { type: 'string', description: 'create: the agent profile (default coder).' },
          topic: { type: 'string', description: 'create: the topic it owns, e.g. "PR 1741"; reused if a child has it.' },
          routingDescription: { type: 'string', description: 'create: what kinds of requests belong to this child.' },
          routingAliases: { type: 'array', items: { type: 'string' }, description: 'create: other names of its topic.' },
          completionPolicy: {
            type: 'string',
            enum: ['each', 'group'],
            description:
              'create: "each" (default) reports every turn end of the child; "group" reports the members of completionGroupId ' +
              'together once all are done (members join only in the turn that creates the group).',
          },
          completionGroupId: { type: 'string', description: 'create: the group this child belongs to (completionPolicy "group").' },
          includeContext: {
            type: 'boolean',
            description:
              'create: true starts the child from this conversation as it stands now (the user and assistant messages, not your ' +
              'tools or instructions). Never together with context (refused context_conflict); neither means the child starts ' +
              'independent, with its task alone.',
          },
          context: {
            type: 'string',
            description:
              'create: an explicit handoff the child reads before its task (what you learned, decisions, constraints). Never ' +
              'together with includeContext: true (refused context_conflict).',
          },
          budgetTokens: {
            type: 'integer',
            description: 'create: tokens carved from your budget for the child (default: a quarter of what remains; returned when it closes).',
          },
          notifyOnComplete: { type: 'boolean', description: 'create: accepted; means completionPolicy "each".' },
          triggerTurnOnComplete: { type: 'boolean', description: 'create: accepted; means completionPolicy "each".' },
        },
        additionalProperties: false,
      },
    },
    required: ['operation', 'args'],
    additionalProperties: false,
  },
};

const listOrchestratorAgentsTool: ToolDefinition = {
  name: 'list_orchestrator_agents',
  description:
    'Every child with its routing metadata and whether it can take work now: childId, title, agent, ' +
    'routingDescription, routingAliases, status, liveness (alive | dead | unknown), runtime, stale, actionable, ' +
    'attachable, reason.',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
};

const updateOrchestratorAgentDescriptionTool: ToolDefinition = {
  name: 'update_orchestrator_agent_description',
  description:
    "Propose a change to a child's routingDescription or routingAliases. confirmed: false returns the exact change " +
    'and a confirmation token; the change takes effect with confirmed: true only once the user has sent that token.',
  parameters: {
    type: 'object',
    properties: {
      sessionID: SESSION_ID,
      routingDescription: { type: 'string' },
      routingAliases: { type: 'array', items: { type: 'string' } },
      confirmed: { type: 'boolean' },
      confirmationToken: { type: 'string' },
    },
    required: ['sessionID', 'confirmed'],
    additionalProperties: false,
  },
};

/** What an orchestrator's model is offered: orchestration only, no bash, no files. */
export const ORCHESTRATOR_TOOLS: readonly ToolDefinition[] = [sessionTool, listOrchestratorAgentsTool, updateOrchestratorAgentDescriptionTool];
