/**
 * The orchestrator's activities as its workflow calls them (implemented by activities/orchestrator.ts): reading a
 * tool call the model made, starting and sending to children, inspecting them, and recording tool results. Task
 * text stays in the transcript: what crosses history is ids, excerpts and answers.
 */
import type { Completion, ModelSpec, OrchestratorChildView } from './messages';

/** Where a tool call is in the transcript: the turn attempt, the model step and the call's id. */
export interface CallRef {
  sessionId: string;
  executionId: string;
  turnId: string;
  turn: number;
  step: number;
  callId: string;
}

/** A `session` tool call as parsed from the model's arguments (workflows/orchestrator/session-call.ts). */
export type SessionCall =
  | {
      readonly operation: 'create';
      readonly title: string;
      readonly task: string;
      readonly agent?: string;
      readonly topic?: string;
      readonly routingDescription?: string;
      readonly routingAliases?: readonly string[];
      /** How the child's turn ends reach the orchestrator's model (`each` unless a group is named). */
      readonly completion: Completion;
      /** Where the child's conversation starts: this orchestrator's conversation (`includeContext`), a handoff, or (absent) nothing. */
      readonly context?: { readonly kind: 'conversation' } | { readonly kind: 'handoff'; readonly text: string };
      /** Tokens carved from the orchestrator's budget for the child (a default share when absent). */
      readonly budgetTokens?: number;
    }
  | { readonly operation: 'send'; readonly sessionID: string; readonly task: string }
  | { readonly operation: 'list' }
  | { readonly operation: 'status'; readonly sessionID: string };

/** A `session` call as the workflow sees it: the task replaced by an excerpt, the context by its kind (the activities read the text). */
export type SessionCallView =
  | (Omit<Extract<SessionCall, { operation: 'create' }>, 'task' | 'context'> & { taskExcerpt: string; context?: 'conversation' | 'handoff' })
  | (Omit<Extract<SessionCall, { operation: 'send' }>, 'task'> & { taskExcerpt: string })
  | Extract<SessionCall, { operation: 'list' | 'status' }>;

export type ReadCallResult =
  | { tool: 'session'; ok: true; call: SessionCallView; repaired?: string }
  | { tool: 'session'; ok: false; code: string; message: string }
  | { tool: string; ok: true; args: Record<string, unknown> }
  | { tool: string; ok: false; code: string; message: string };

export type DispatchResult = { ok: true; taskId?: string; outcome?: 'created' | 'bound' } | { ok: false; code: string; message: string };

export type Liveness = 'alive' | 'dead' | 'unknown';

/** What Temporal says of a child's workflow now (for `list_orchestrator_agents`). */
export interface ChildInspection {
  readonly childId: string;
  readonly liveness: Liveness;
  readonly runtime: string;
}

/** A routing cache row as read back: whatever is in the table, which nothing trusts (its status is any text). */
export type RoutingCacheRow = Pick<OrchestratorChildView, 'childId' | 'title' | 'agent' | 'topicKey' | 'routingDescription' | 'routingAliases'> & {
  readonly status: string;
};

export interface OrchestratorActivities {
  /** The tool call the model made, parsed (a `session` call's task as an excerpt). */
  readOrchestratorCall(ref: CallRef): Promise<ReadCallResult>;
  /** Starts (or binds to) a child session with the call's task; the request id makes a retry dispatch once. */
  createChild(input: {
    ref: CallRef;
    childId: string;
    requestId: string;
    title: string;
    agent?: string;
    repo: string;
    host: string;
    parent: string;
    model?: ModelSpec;
    /** The child's budget: its own, or carved from the parent's (`fundedBy`, which funds its raises too). */
    budgetTokens?: number;
    fundedBy?: string;
  }): Promise<DispatchResult>;
  /**
   * A child's budget raise, carved from the parent that funds it (its `fundChild` update): the parent's refusal
   * (`budget_insufficient`, …) comes back as a result, not a failure.
   */
  fundFromParent(input: {
    parent: string;
    childId: string;
    limit: number;
    requestId: string;
  }): Promise<{ ok: true } | { ok: false; code: string; message: string }>;
  /** Sends the call's task to a child; the request id makes a retry dispatch once. */
  sendToChild(input: { ref: CallRef; childId: string; requestId: string; from: string }): Promise<DispatchResult>;
  /**
   * For `list_orchestrator_agents`: what Temporal says of each child now, and the routing cache rows (returned
   * to be labelled, never to decide anything). Cache rows naming children outside the ledger are inspected too.
   */
  inspectChildren(input: { orchestratorId: string; childIds: string[] }): Promise<{ inspected: ChildInspection[]; cache: RoutingCacheRow[] }>;
  /** Writes changed ledger rows into the routing cache (a projection; see migration 006). */
  projectRoutingCache(input: { orchestratorId: string; children: OrchestratorChildView[] }): Promise<void>;
  recordToolResult(input: CallRef & { index: number; content: string }): Promise<void>;
}
