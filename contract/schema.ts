/**
 * The contract's shapes as zod schemas: every workflow's start input and result, and every signal, update and query
 * payload and result, for clients in any language (`scripts/schema.ts` writes them as JSON Schema into docs/schema/).
 *
 * The TypeScript types in messages.ts stay the ones the code uses; each schema here is tied to its type by
 * `agrees<Type>()(schema)`, which fails to compile unless the schema's output type and the contract type are the
 * same (both ways, every field, its optionality and its literals), so the two cannot drift apart.
 *
 * Workflows never import this module (zod stays out of the workflow bundle); their validators remain the
 * `xxxProblem` functions of messages.ts, which test/unit/contract-schema.test.ts holds to the same inputs.
 */
import type { QueryDefinition, SignalDefinition, UpdateDefinition } from '@temporalio/common';
import { z } from 'zod';
import { ERROR_CODES } from './errors';
import { MEMBER_ID_PATTERN } from './member-session';
import { SESSION_ID_PATTERN } from './ids';
import {
  DEFAULT_LIMITS,
  LIMIT_MINIMUMS,
  MAX_CONTEXT_CHARS,
  MAX_HANDOFF_MS,
  MAX_TASK_CHARS,
  MAX_VERIFY_TIMEOUT_MS,
  verifyTeamUpdate,
  type VerificationView as VerificationViewType,
  type VerifyTeamInput as VerifyTeamInputType,
  type VerifyTeamResult as VerifyTeamResultType,
  type BudgetView as BudgetViewType,
  type FundChildInput as FundChildInputType,
  type SetBudgetInput as SetBudgetInputType,
  fundChildUpdate,
  setBudgetUpdate,
  type CancelInput as CancelInputType,
  type CancelTaskInput as CancelTaskInputType,
  type CancelTaskResult as CancelTaskResultType,
  type ChildTurnEnded as ChildTurnEndedType,
  type BoardOutcomeFacts as BoardOutcomeFactsType,
  type Completion as CompletionType,
  type CompletionGroupView as CompletionGroupViewType,
  type CoordinatorTurnView as CoordinatorTurnViewType,
  type CreateRequest as CreateRequestType,
  type ConversationBound as ConversationBoundType,
  type CreateResult as CreateResultType,
  type CreateSessionInput as CreateSessionInputType,
  type MemberMessageFact as MemberMessageFactType,
  type MessageInput as MessageInputType,
  type MessageResult as MessageResultType,
  type ModelSpec as ModelSpecType,
  type OrchestratorChildView as OrchestratorChildViewType,
  type OrchestratorDelivery as OrchestratorDeliveryType,
  type OrchestratorStatusView as OrchestratorStatusViewType,
  type OrchestratorWorkflowInput as OrchestratorWorkflowInputType,
  type ReassignInput as ReassignInputType,
  type ReceiptView as ReceiptViewType,
  type RefusedSend as RefusedSendType,
  type ResolveHandoffInput as ResolveHandoffInputType,
  type ResolveHoldInput as ResolveHoldInputType,
  type ResolveHoldResult as ResolveHoldResultType,
  type RoutingChange as RoutingChangeType,
  type SendInput as SendInputType,
  type SendResult as SendResultType,
  type SessionLimits as SessionLimitsType,
  type SessionStatusView as SessionStatusViewType,
  type SessionWorkflowInput as SessionWorkflowInputType,
  type StartOrchestratorInput as StartOrchestratorInputType,
  type StartTeamInput as StartTeamInputType,
  type TaskExecutionInput as TaskExecutionInputType,
  type TaskExecutionSettled as TaskExecutionSettledType,
  type TaskExecutionView as TaskExecutionViewType,
  type TaskRecord as TaskRecordType,
  type TeamFact as TeamFactType,
  type TeamMemberSpec as TeamMemberSpecType,
  type TeamMembership as TeamMembershipType,
  type TeamMergeResult as TeamMergeResultType,
  type TeamStatusView as TeamStatusViewType,
  type TeamWorkflowInput as TeamWorkflowInputType,
  type TranscriptRefs as TranscriptRefsType,
  type TurnRef as TurnRefType,
  cancelTaskUpdate,
  cancelUpdate,
  childTurnEndedSignal,
  pauseTeamUpdate,
  resumeTeamUpdate,
  archiveTeamUpdate,
  type TeamLifecycleInput as TeamLifecycleInputType,
  type TeamLifecycleResult as TeamLifecycleResultType,
  TEAM_OUTCOMES,
  createUpdate,
  executionTurnEndedSignal,
  mergeTeamUpdate,
  messageSignal,
  messageUpdate,
  ORCHESTRATOR_WORKFLOW_TYPE,
  orchestratorStartQuery,
  orchestratorStatusQuery,
  reassignTaskUpdate,
  resolveHandoffUpdate,
  resolveHoldUpdate,
  rosterQuery,
  sendSignal,
  sendUpdate,
  SESSION_WORKFLOW_TYPE,
  statusQuery,
  TASK_EXECUTION_WORKFLOW_TYPE,
  taskExecutionQuery,
  taskExecutionSettledSignal,
  TEAM_WORKFLOW_TYPE,
  teamFactSignal,
  teamMessageSignal,
  teamMessageUpdate,
  teamStartQuery,
  teamStatusQuery,
  transcriptRefsQuery,
} from './messages';

/** A type with every `readonly` removed and intersections flattened, so that only the shape itself is compared. */
type Plain<T> = T extends string | number | boolean | null | undefined
  ? T
  : T extends readonly (infer U)[]
    ? Plain<U>[]
    : { -readonly [K in keyof T]: Plain<T[K]> };
/** True only when A and B are the same shape: the same fields, each as optional and with the same type. */
type Same<A, B> = (<G>() => G extends Plain<A> ? 1 : 2) extends <G>() => G extends Plain<B> ? 1 : 2 ? true : false;

/** A workflow's start input as a client gives it: `carried` is the workflow's own state on a continued run only. */
type ClientStart<T> = Omit<T, 'carried'>;

/**
 * Ties a schema to the contract type `T`: compiles only when the schema's output is exactly `T`. When it is not, tsc
 * reports "Expected 2 arguments": the expected argument's type shows the schema's shape beside the contract's.
 */
function agrees<T>() {
  return <S extends z.ZodType>(schema: S, ..._mismatch: Same<z.output<S>, T> extends true ? [] : [{ schema: Plain<z.output<S>>; contract: Plain<T> }]): S =>
    schema;
}

/** A named shape: its own entry in the JSON Schema's `$defs`, referenced wherever it is used. */
const named = <S extends z.ZodType>(id: string, description: string, schema: S): S => schema.meta({ id, description });

// Scalars ---------------------------------------------------------------------------------------------------

const plainId = (what: string) =>
  z
    .string()
    .regex(SESSION_ID_PATTERN)
    .describe(`${what}: 1-64 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit, without "..", not ending in "." or ".lock"`);
/** A team Member's session id (`<teamId>__<memberId>`) may be longer than a plain id. */
const sessionId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/)
  .max(64 + 2 + 24)
  .describe('a session id: a plain id, or a team Member\'s "<teamId>__<memberId>"');
const taskText = (what: string) => z.string().min(1).max(MAX_TASK_CHARS).describe(what);
const requestId = z.string().min(1).max(200).describe('idempotency key: a retry with the same id is answered the same way and changes nothing again');
const repo = z.string().regex(/^\//).describe('absolute path of the git repository on the host');
const host = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/)
  .describe('the host whose worker owns the worktrees (its activities run on the queue orchard-host-<host>)');
const errorCode = z.enum(ERROR_CODES);
const codedError = z.strictObject({ code: z.string(), message: z.string() });

// Shared shapes ---------------------------------------------------------------------------------------------

export const ModelSpec = agrees<ModelSpecType>()(
  named(
    'ModelSpec',
    "Which model plays the agent: the worker's configured provider, or a scripted scenario file the worker can read.",
    z.discriminatedUnion('provider', [
      z.object({ provider: z.literal('default') }),
      z.object({ provider: z.literal('scripted'), scenario: z.string().min(1).describe('path of the scenario file on the worker') }),
    ]),
  ),
);

const limit = (key: keyof SessionLimitsType, what: string) =>
  z
    .number()
    .int()
    .min(LIMIT_MINIMUMS[key] ?? 1)
    .describe(`${what} (default ${DEFAULT_LIMITS[key]})`);
export const SessionLimits = agrees<SessionLimitsType>()(
  named(
    'SessionLimits',
    "A session's limits; a start input gives any subset, the rest are the worker's defaults.",
    z.object({
      maxStepsPerTurn: limit('maxStepsPerTurn', 'model calls per turn before the turn ends as step_limit'),
      turnsPerRun: limit('turnsPerRun', 'turns per workflow run before continue-as-new'),
      bashTimeoutSeconds: limit('bashTimeoutSeconds', 'upper bound of one bash command, in seconds'),
      hostWaitSeconds: limit('hostWaitSeconds', "how long a worktree activity waits for its host's worker"),
      maxQueuedTasks: limit('maxQueuedTasks', 'tasks waiting at most; beyond it a send is refused with queue_full'),
      historyBudgetBytes: limit('historyBudgetBytes', 'history bytes one run may reach before sends are refused with queue_full'),
      contextChars: limit('contextChars', 'characters of conversation a model request carries at most'),
      maxOutputTokens: limit(
        'maxOutputTokens',
        "tokens one model call may produce: sent as max_tokens when there is a budget, and part of each call's reservation",
      ).optional(),
    }),
  ),
);
const limitsGiven = SessionLimits.partial().strict().describe('any subset of SessionLimits; an unknown limit is refused');

export const TurnRef = agrees<TurnRefType>()(
  named(
    'TurnRef',
    'One turn: its outcome, steps and tool calls; the transcript is in PostgreSQL under (executionId, turnId).',
    z.strictObject({
      turn: z.number().int(),
      turnId: z.string().optional(),
      taskId: z.string(),
      outcome: z.enum(['finished', 'step_limit', 'failed', 'cancelled', 'budget_exhausted']),
      steps: z.number().int(),
      toolCalls: z.number().int(),
      finalExcerpt: z.string().optional().describe("the model's final text, cut short"),
      error: codedError.optional(),
    }),
  ),
);

export const MessageInput = agrees<MessageInputType>()(
  named(
    'MessageInput',
    'A user message to an orchestrator or a team Coordinator; becomes the user message of one turn.',
    z.object({ text: taskText('what the user says'), requestId: requestId.optional() }),
  ),
);
export const MessageResult = agrees<MessageResultType>()(
  named(
    'MessageResult',
    'The accepted message: its id, and whether its requestId was seen before (then nothing new was queued).',
    z.strictObject({ messageId: z.string(), duplicate: z.boolean() }),
  ),
);

export const ChildTurnEnded = agrees<ChildTurnEndedType>()(
  named(
    'ChildTurnEnded',
    "A session's turn ended, or the session closed (closed: true): sent by Orchard's own sessions to their orchestrator or team, deduplicated on (childId, turnId).",
    z.object({
      childId: z.string(),
      turnId: z.string(),
      taskId: z.string(),
      outcome: TurnRef.shape.outcome,
      excerpt: z.string().optional(),
      queued: z.number().int(),
      closed: z.boolean().optional(),
      error: codedError.optional().describe("a failed turn's or session's typed code and message"),
      budget: z
        .strictObject({ limit: z.number().int().optional(), spent: z.number().int() })
        .optional()
        .describe("the child's budget: its funding parent counts the spend, and returns the unspent escrow once it closed"),
    }),
  ),
);

// Sessions --------------------------------------------------------------------------------------------------

const budgetTokens = (what: string) => z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).describe(what);

export const BudgetView = agrees<BudgetViewType>()(
  named(
    'BudgetView',
    'A token budget: tokens spent (a model that reports no usage counts at its reservation), the limit, what open children hold (escrowed), what remains.',
    z.strictObject({
      limit: z.number().int().optional().describe('absent when there is no cap (spend is counted all the same)'),
      spent: z.number().int().describe("this workflow's model calls, and a parent's children's"),
      escrowed: z.number().int().optional().describe("a parent: its open children's budgets not yet spent, returned when they close"),
      remaining: z.number().int().optional().describe('limit - spent - escrowed'),
      exhausted: z.boolean().optional().describe('a model call was refused for want of budget: queued tasks wait for setBudget'),
      fundedBy: z.string().optional().describe('the parent workflow this budget was carved from'),
    }),
  ),
);
export const SetBudgetInput = agrees<SetBudgetInputType>()(
  named(
    'SetBudgetInput',
    "The 'setBudget' update: a session's new token limit (a budget carved from a parent only grows, carved from the parent).",
    z.object({ limit: budgetTokens('the new limit, at least what is spent'), requestId }),
  ),
);
export const FundChildInput = agrees<FundChildInputType>()(
  named(
    'FundChildInput',
    "The 'fundChild' update: a child's raise carved from its parent's budget (sent by the child's setBudget).",
    z.object({ childId: z.string(), limit: budgetTokens("the child's new limit"), requestId }),
  ),
);

const taskState = z.enum(['queued', 'running', 'done', 'failed', 'cancelled']);

export const TeamMembership = agrees<TeamMembershipType>()(
  named(
    'TeamMembership',
    "The team and Member a Member's session works for (set by the team run, not by clients).",
    z.object({ teamId: z.string(), memberId: z.string() }),
  ),
);

export const CreateSessionInput = agrees<CreateSessionInputType>()(
  named(
    'CreateSessionInput',
    'What a session is created with.',
    z.object({
      sessionId: sessionId.describe('becomes the workflow id session/<sessionId> and the branch orchard/<sessionId>/work'),
      title: z.string().min(1).describe('one line the roster, the Web UI and session list show'),
      repo,
      host,
      baseRef: z.string().optional().describe("where the session's branch starts; the repository's HEAD when absent"),
      agent: z.string().optional().describe('agent profile name, shown in the roster'),
      parent: z.string().optional().describe('workflow id of the orchestrator that owns this child (set by the orchestrator)'),
      isolated: z.boolean().optional().describe('the child may only touch its own branch (set by the orchestrator)'),
      team: TeamMembership.optional(),
      model: ModelSpec.optional(),
      limits: limitsGiven.optional(),
      budgetTokens: budgetTokens("tokens the session may spend on model calls (the worker's ORCHARD_DEFAULT_BUDGET_TOKENS when absent)").optional(),
      fundedBy: z.string().optional().describe('the orchestrator or team whose budget this one was carved from (set by it)'),
      task: taskText('a first task, queued before the worktree exists').optional(),
      requestId: requestId
        .optional()
        .describe('the create request that started this execution chain (the same requestId as the create update of an update-with-start)'),
    }),
  ),
);

export const SessionWorkflowInput = agrees<ClientStart<SessionWorkflowInputType>>()(
  named('SessionWorkflowInput', 'The start input of a childSession workflow (workflow id session/<sessionId>).', z.object({ create: CreateSessionInput })),
);

export const SendInput = agrees<SendInputType>()(
  named(
    'SendInput',
    "A task for the session (update or signal 'send'); becomes the user message of one turn.",
    z.object({
      task: taskText('what the session should do next'),
      requestId: requestId.optional(),
      from: z.string().optional().describe('who relayed it (orchestrator id, service name), kept for the transcript'),
    }),
  ),
);

export const SendResult = agrees<SendResultType>()(
  named(
    'SendResult',
    'The acknowledgement of a send: the task id, its place in the queue and where it stands.',
    z.strictObject({
      taskId: z.string(),
      position: z.number().int().describe('tasks ahead of this one (0: it runs next, or now)'),
      status: z
        .enum(['progressing', 'idle', 'failed_open', 'closed'])
        .describe(
          'progressing: a turn runs or is queued; idle: open, nothing to do; failed_open: its last turn failed, it takes the next task; closed: it takes nothing more',
        ),
      duplicate: z.boolean().describe('the requestId was seen before and nothing new was queued'),
      taskState: taskState.optional(),
    }),
  ),
);

export const ConversationBound = agrees<ConversationBoundType>()(
  named(
    'ConversationBound',
    "The parent orchestrator's conversation up to the model answer that made a create (includeContext), by reference to its transcript in Postgres.",
    z.object({
      orchestratorId: z.string().min(1).describe("the parent orchestrator's id (its workflow id must be the session's parent)"),
      executionId: z.string().min(1),
      turnId: z.string().min(1),
      turn: z.number().int().min(1),
      step: z.number().int().min(1),
    }),
  ),
);

export const CreateRequest = agrees<CreateRequestType>()(
  named(
    'CreateRequest',
    "The 'create' update (sent with update-with-start): binds the caller to the session, optionally with a first task.",
    z.object({
      requestId,
      task: taskText('a first task').optional(),
      from: z.string().optional(),
      context: z
        .string()
        .min(1)
        .max(MAX_CONTEXT_CHARS)
        .optional()
        .describe('an explicit handoff: a user message before the first task (never with parentConversation: context_conflict)'),
      parentConversation: ConversationBound.optional(),
    }),
  ),
);

export const CancelInput = agrees<CancelInputType>()(
  named('CancelInput', "The 'cancel' update: closes the session.", z.object({ reason: z.string().optional() })),
);

export const ResolveHoldInput = agrees<ResolveHoldInputType>()(
  named(
    'ResolveHoldInput',
    "The 'resolveHold' update: a user resolves a verification hold, and the worktree runs commands again.",
    z.object({ by: z.string().optional().describe('who decided; user when absent'), note: z.string().optional().describe('what was done about the change') }),
  ),
);
export const ResolveHoldResult = agrees<ResolveHoldResultType>()(
  named(
    'ResolveHoldResult',
    'The resolved hold.',
    z.strictObject({ holdId: z.string(), command: z.string(), heldAt: z.string(), resolvedAt: z.string(), resolvedBy: z.string() }),
  ),
);

const TaskRecord = agrees<TaskRecordType>()(
  named(
    'TaskRecord',
    'A task that reached a terminal state.',
    z.strictObject({
      taskId: z.string(),
      state: taskState,
      excerpt: z.string(),
      turn: z.number().int().optional(),
      outcome: z.string().optional(),
      reason: z.string().optional(),
    }),
  ),
);
const RefusedSend = agrees<RefusedSendType>()(
  named('RefusedSend', 'A signalled send that was refused.', z.strictObject({ code: errorCode, requestId: z.string().optional(), excerpt: z.string() })),
);

export const SessionStatusView = agrees<SessionStatusViewType>()(
  named(
    'SessionStatusView',
    "A session as the 'status' query, the 'cancel' update and the workflow's result show it.",
    z.strictObject({
      sessionId: z.string(),
      title: z.string(),
      agent: z.string(),
      host: z.string(),
      repo: z.string(),
      branch: z.string().optional(),
      worktree: z.string().optional(),
      confinement: z.enum(['confined', 'unconfined']).optional(),
      held: z.boolean().optional(),
      status: SendResult.shape.status,
      closedAs: z.enum(['cancelled', 'failed']).optional().describe('how a closed session closed'),
      turnsCompleted: z.number().int(),
      currentTask: z.strictObject({ taskId: z.string(), turn: z.number().int(), excerpt: z.string() }).optional(),
      queued: z.number().int(),
      lastTurn: TurnRef.optional(),
      runIndex: z.number().int(),
      error: codedError.optional(),
      executionId: z.string().optional(),
      closing: z.boolean().optional(),
      tasks: z.record(taskState, z.number().int()).optional(),
      recentTasks: z.array(TaskRecord).optional(),
      refusedSignals: z.strictObject({ count: z.number().int(), recent: z.array(RefusedSend) }).optional(),
      limits: SessionLimits.optional(),
      budget: BudgetView.optional(),
    }),
  ),
);

export const CreateResult = agrees<CreateResultType>()(
  named(
    'CreateResult',
    "The answer to the 'create' update: created (this request started the chain) or bound (it was running).",
    z.strictObject({ outcome: z.enum(['created', 'bound']), task: SendResult.optional(), session: SessionStatusView }),
  ),
);

export const TranscriptRefs = agrees<TranscriptRefsType>()(
  named(
    'TranscriptRefs',
    'Where the transcript rows in PostgreSQL are: the execution chain and the turn refs.',
    z.strictObject({ sessionId: z.string(), executionId: z.string().optional(), turns: z.array(TurnRef) }),
  ),
);

// Orchestrators ---------------------------------------------------------------------------------------------

export const StartOrchestratorInput = agrees<StartOrchestratorInputType>()(
  named(
    'StartOrchestratorInput',
    'What an orchestrator is started with (also the answer of its start query).',
    z.object({
      orchestratorId: plainId('becomes the workflow id orchestrator/<orchestratorId>'),
      repo,
      host,
      title: z.string().min(1).optional(),
      model: ModelSpec.optional().describe("the orchestrator's own model"),
      childModel: ModelSpec.optional().describe("its children's model"),
      limits: limitsGiven.optional(),
      budgetTokens: budgetTokens('tokens the orchestrator and all its children may spend together').optional(),
    }),
  ),
);

export const OrchestratorWorkflowInput = agrees<ClientStart<OrchestratorWorkflowInputType>>()(
  named(
    'OrchestratorWorkflowInput',
    'The start input of an orchestratorSession workflow (workflow id orchestrator/<orchestratorId>).',
    z.object({ start: StartOrchestratorInput }),
  ),
);

const Completion = agrees<CompletionType>()(
  named(
    'Completion',
    "How a child's turn ends reach the orchestrator's model: each on its own, or with its completion group.",
    z.discriminatedUnion('policy', [z.strictObject({ policy: z.literal('each') }), z.strictObject({ policy: z.literal('group'), groupId: z.string() })]),
  ),
);
const OrchestratorChildView = agrees<OrchestratorChildViewType>()(
  named(
    'OrchestratorChildView',
    "A child in the orchestrator's ledger.",
    z.strictObject({
      childId: z.string(),
      title: z.string(),
      agent: z.string(),
      topicKey: z.string().optional(),
      routingDescription: z.string().optional(),
      routingAliases: z.array(z.string()),
      status: z.enum(['running', 'idle', 'failed', 'cancelled']),
      provenance: z.strictObject({ turn: z.number().int(), callId: z.string() }),
      lastActivity: z.number().int(),
      turnEnds: z.number().int(),
      completion: Completion.optional(),
    }),
  ),
);
const CompletionGroupView = agrees<CompletionGroupViewType>()(
  named(
    'CompletionGroupView',
    'A completion group: members registered in the turn that opened it.',
    z.strictObject({
      groupId: z.string(),
      openedTurn: z.number().int(),
      members: z.array(z.string()),
      terminal: z.array(z.string()),
      sealed: z.boolean(),
      delivered: z.boolean(),
    }),
  ),
);
const RoutingChange = agrees<RoutingChangeType>()(
  named(
    'RoutingChange',
    "A proposed change to a child's routing metadata.",
    z.strictObject({ routingDescription: z.string().optional(), routingAliases: z.array(z.string()).optional() }),
  ),
);
const OrchestratorDelivery = agrees<OrchestratorDeliveryType>()(
  named(
    'OrchestratorDelivery',
    'One dispatch of work to a child.',
    z.strictObject({
      messageId: z.string(),
      turn: z.number().int(),
      childId: z.string(),
      via: z.enum(['create', 'topic', 'send']),
      taskId: z.string().optional(),
    }),
  ),
);

export const OrchestratorStatusView = agrees<OrchestratorStatusViewType>()(
  named(
    'OrchestratorStatusView',
    "An orchestrator as the 'status' query and the workflow's result show it.",
    z.strictObject({
      orchestratorId: z.string(),
      status: z.enum(['progressing', 'idle']),
      children: z.array(OrchestratorChildView),
      turnsCompleted: z.number().int(),
      queued: z.number().int(),
      refusedSignals: z.number().int().optional(),
      lastTurn: TurnRef.optional(),
      turns: z.array(TurnRef),
      deliveries: z.array(OrchestratorDelivery),
      groups: z.array(CompletionGroupView),
      proposals: z.array(z.strictObject({ token: z.string(), childId: z.string(), change: RoutingChange, confirmedBy: z.string().optional() })),
      runIndex: z.number().int(),
      budget: BudgetView.optional(),
    }),
  ),
);

export const RosterText = agrees<string>()(named('RosterText', "The roster text the orchestrator's model gets next ('roster' query).", z.string()));

// Team runs -------------------------------------------------------------------------------------------------

export const TeamMemberSpec = agrees<TeamMemberSpecType>()(
  named(
    'TeamMemberSpec',
    'A Member of a team.',
    z.object({
      memberId: z.string().regex(MEMBER_ID_PATTERN).describe('unique in the team: lower case, digits and -, starting with a letter, at most 24'),
      role: z.string().min(1).describe('its agent profile name (Planner, Implementer, Reviewer, Tester…)'),
    }),
  ),
);

export const StartTeamInput = agrees<StartTeamInputType>()(
  named(
    'StartTeamInput',
    'What a team run is started with (also the answer of its start query).',
    z.object({
      teamId: plainId('becomes the workflow id team/<teamId>; no "__"'),
      repo,
      host,
      goal: taskText("the team's goal: the Coordinator's first user message"),
      members: z.array(TeamMemberSpec).min(1).max(12).optional().describe('default: planner, implementer, reviewer, tester'),
      protectedBranch: z.string().optional().describe('the branch no member and no Coordinator may move (default main)'),
      model: ModelSpec.optional().describe("the Coordinator's model"),
      memberModel: ModelSpec.optional().describe("the Members' model"),
      limits: limitsGiven.optional(),
      budgetTokens: budgetTokens('tokens the Coordinator and all Members may spend together').optional(),
      handoff: z
        .strictObject({ sloMs: z.number().int().min(1).max(MAX_HANDOFF_MS).optional(), timeoutMs: z.number().int().min(1).max(MAX_HANDOFF_MS).optional() })
        .optional()
        .describe('handoff SLO and timeout in milliseconds (defaults 5000 and 10000; the SLO no later than the timeout)'),
      verify: z
        .strictObject({
          command: z.string().min(1).max(4096).describe('run with bash -c in a sandboxed checkout of the result tree; delivered only when it exits 0'),
          timeoutMs: z.number().int().min(1000).max(MAX_VERIFY_TIMEOUT_MS).optional().describe('default 300000'),
        })
        .optional()
        .describe('delivery verified by running it: org_run_complete runs the command on the result before it certifies'),
    }),
  ),
);

export const TeamWorkflowInput = agrees<ClientStart<TeamWorkflowInputType>>()(
  named('TeamWorkflowInput', 'The start input of a teamRun workflow (workflow id team/<teamId>).', z.object({ start: StartTeamInput })),
);

export const ReceiptView = agrees<ReceiptViewType>()(
  named(
    'ReceiptView',
    'A handoff receipt: running work fenced and yielded for a reassign, a cancel, a pause or an archive.',
    z.strictObject({
      receiptId: z.string(),
      kind: z.enum(['reassign', 'cancel', 'pause', 'archive']),
      oldTaskId: z.string(),
      newTaskId: z.string().optional(),
      oldOwner: z.string(),
      newOwner: z.string().optional(),
      state: z.enum(['requested', 'yielding', 'released', 'timeout', 'unknown', 'failed']),
      sloMissed: z.boolean(),
      trail: z.array(z.string()),
      resolution: z.enum(['keep_stopped', 'release']).optional(),
    }),
  ),
);

export const ReassignInput = agrees<ReassignInputType>()(
  named(
    'ReassignInput',
    "The 'reassignTask' update: the work goes on with newOwner as a replacement task.",
    z.object({ requestId: requestId.optional(), taskId: z.string(), newOwner: z.string(), reason: z.string() }),
  ),
);
export const CancelTaskInput = agrees<CancelTaskInputType>()(
  named(
    'CancelTaskInput',
    "The 'cancelTask' update: the task leaves the run's scope.",
    z.object({ requestId: requestId.optional(), taskId: z.string(), reason: z.string() }),
  ),
);
export const CancelTaskResult = agrees<CancelTaskResultType>()(
  named(
    'CancelTaskResult',
    'The cancelled task, and the receipt when running work was fenced and yielded.',
    z.strictObject({ taskId: z.string(), status: z.literal('cancelled'), workRevision: z.number().int(), receipt: ReceiptView.optional() }),
  ),
);
export const TeamLifecycleInput = agrees<TeamLifecycleInputType>()(
  named(
    'TeamLifecycleInput',
    "The 'pauseTeam', 'resumeTeam' and 'archiveTeam' updates: why (and a request id: a retry answers the first).",
    z.object({ requestId: requestId.optional(), reason: z.string().min(1) }),
  ),
);
export const TeamLifecycleResult = agrees<TeamLifecycleResultType>()(
  named(
    'TeamLifecycleResult',
    'What a pause, resume or archive did: the state after it, the receipts of the running work it fenced, the tasks an archive cancelled.',
    z.strictObject({
      teamId: z.string(),
      state: z.enum(['paused', 'running', 'archived']),
      receipts: z.array(ReceiptView),
      cancelledTasks: z.array(z.string()).optional(),
      workRevision: z.number().int(),
    }),
  ),
);
export const ResolveHandoffInput = agrees<ResolveHandoffInputType>()(
  named(
    'ResolveHandoffInput',
    "The 'resolveHandoff' update: keep_stopped cancels only the replacement; release starts it, given proof the old runtime is quiescent.",
    z.object({ requestId: requestId.optional(), receiptId: z.string(), action: z.enum(['keep_stopped', 'release']), reason: z.string().optional() }),
  ),
);
export const TeamMergeResult = agrees<TeamMergeResultType>()(
  named(
    'TeamMergeResult',
    "The answer to 'mergeTeam': the certified result merged into the protected branch (repeating it changes nothing).",
    z.strictObject({
      teamId: z.string(),
      certificateId: z.string(),
      protectedBranch: z.string(),
      resultBranch: z.string(),
      resultHead: z.string(),
      before: z.string(),
      after: z.string(),
      mode: z.enum(['already_contained', 'fast_forward', 'merge_commit']),
      eventId: z.string(),
      mergedAt: z.string(),
    }),
  ),
);

const VerificationView = agrees<VerificationViewType>()(
  named(
    'VerificationView',
    "One run of a team's verify command on a result tree (its output is in PostgreSQL, team_verifications).",
    z.strictObject({
      verificationId: z.string(),
      command: z.string(),
      resultHead: z.string(),
      tree: z.string(),
      exitCode: z.number().int().nullable().describe('null when it was killed (timedOut)'),
      timedOut: z.boolean(),
      durationMs: z.number().int(),
      outputDigest: z.string().describe('sha256 of stdout, NUL, stderr as stored'),
      confined: z.boolean(),
      passed: z.boolean(),
      excerpt: z.string().describe('the end of its output, at most 2000 characters'),
    }),
  ),
);
export const VerifyTeamInput = agrees<VerifyTeamInputType>()(
  named('VerifyTeamInput', "The 'verifyTeam' update: a request id (a retry answers the first run).", z.object({ requestId: requestId.optional() })),
);
export const VerifyTeamResult = agrees<VerifyTeamResultType>()(
  named(
    'VerifyTeamResult',
    "The answer to 'verifyTeam': what the certificate bound, the new run on the certified tree, and whether it still passes with the same output.",
    z.strictObject({
      teamId: z.string(),
      certificateId: z.string(),
      certified: VerificationView.omit({ passed: true, excerpt: true }),
      run: VerificationView,
      stillPasses: z.boolean(),
      outputMatches: z.boolean(),
    }),
  ),
);

const MemberMessageFact = agrees<MemberMessageFactType>()(
  named(
    'MemberMessageFact',
    "A Member's message accepted into the Coordinator's Inbox.",
    z.object({
      messageId: z.string(),
      from: z.string(),
      executionId: z.string(),
      relatedTaskId: z.string(),
      purpose: z.string(),
      excerpt: z.string(),
    }),
  ),
);
export const TeamFact = agrees<TeamFactType>()(
  named(
    'TeamFact',
    "The 'fact' signal: a fact was committed outside the run (sent by Orchard's own activities and Member sessions).",
    z.object({ revision: z.number().int(), message: MemberMessageFact.optional() }),
  ),
);

const TaskExecutionView = agrees<TaskExecutionViewType>()(
  named(
    'TaskExecutionView',
    'One dispatch of a task to its owner.',
    z.strictObject({
      executionId: z.string(),
      workflowId: z.string().optional(),
      taskId: z.string(),
      memberId: z.string(),
      sessionId: z.string(),
      state: z.enum(['running', 'completed', 'failed', 'handed_off', 'cancelled', 'paused']),
      sessionTaskId: z.string().optional(),
      failure: codedError.optional().describe("why it failed: the Member's typed code and message"),
    }),
  ),
);
const CoordinatorTurnView = agrees<CoordinatorTurnViewType>()(
  named(
    'CoordinatorTurnView',
    'One Coordinator turn.',
    z.strictObject({
      turn: z.number().int(),
      turnId: z.string(),
      startRevision: z.number().int(),
      endRevision: z.number().int(),
      outcome: z.enum(['finished', 'step_limit', 'failed', 'cancelled', 'budget_exhausted', 'waiting_for_org_event']),
      modelCalls: z.number().int(),
      toolCalls: z.number().int(),
      finalExcerpt: z.string().optional(),
    }),
  ),
);

export const TeamStatusView = agrees<TeamStatusViewType>()(
  named(
    'TeamStatusView',
    "A team run as the 'status' query and the workflow's result show it.",
    z.strictObject({
      teamId: z.string(),
      goal: z.string(),
      status: z.enum(['coordinating', 'waiting_for_org_event', 'delivered', 'paused', 'archived']),
      paused: z.strictObject({ reason: z.string() }).optional(),
      archived: z.strictObject({ reason: z.string(), eventId: z.string() }).optional(),
      outcome: z.enum(TEAM_OUTCOMES).describe("what the run has come to (the team's OrchardStatus)"),
      outcomeBecause: z.array(z.string()).describe('why it needs attention or failed'),
      generation: z.number().int(),
      workRevision: z.number().int(),
      readRevision: z.number().int(),
      members: z.array(z.strictObject({ memberId: z.string(), role: z.string(), sessionId: z.string() })),
      planApproved: z.boolean(),
      executions: z.array(TaskExecutionView),
      turns: z.array(CoordinatorTurnView),
      replies: z.array(z.string()),
      refusals: z.array(z.strictObject({ tool: z.string(), code: z.string() })),
      queuedMessages: z.number().int(),
      refusedSignals: z.number().int().optional(),
      receipts: z.array(ReceiptView),
      waiting: z.array(z.strictObject({ taskId: z.string(), waiting: z.literal('waiting_for_previous_execution'), receiptId: z.string() })),
      candidate: z.enum(['ready', 'blocked', 'not_applicable', 'certified']).optional(),
      certificate: z
        .strictObject({
          certificateId: z.string(),
          generation: z.number().int(),
          workRevision: z.number().int(),
          taskIds: z.array(z.string()),
          outputIds: z.array(z.string()),
          resultBranch: z.string().optional(),
          resultHead: z.string().optional(),
          verified: z.boolean().optional().describe('it binds a passing run of the verify command'),
        })
        .optional(),
      verification: VerificationView.optional().describe('the newest run of the verify command at completion'),
      summary: z.strictObject({ certificateId: z.string(), turn: z.number().int(), text: z.string() }).optional(),
      budget: BudgetView.optional(),
    }),
  ),
);

// Team task executions (started and signalled by their team run; public for reading) --------------------------

export const TaskExecutionInput = agrees<TaskExecutionInputType>()(
  named(
    'TaskExecutionInput',
    'The start input of a teamTaskExecution workflow (started by its team run).',
    z.object({
      teamId: z.string(),
      taskId: z.string(),
      executionId: z.string(),
      memberId: z.string(),
      role: z.string(),
      sessionId: z.string(),
      repo: z.string(),
      host: z.string(),
      model: ModelSpec.optional(),
      budgetTokens: budgetTokens("the Member's session budget carved from the team's").optional(),
    }),
  ),
);

const BoardOutcomeFacts = agrees<BoardOutcomeFactsType>()(
  named(
    'BoardOutcomeFacts',
    "What the board says about a team run's outcome: failed tasks nothing replaces, and whether users removed every task.",
    z.strictObject({ failedUnreplaced: z.array(z.string()), userRemovedAll: z.boolean() }),
  ),
);

export const TaskExecutionSettled = agrees<TaskExecutionSettledType>()(
  named(
    'TaskExecutionSettled',
    "How a task execution ended: its workflow's result, and the 'executionSettled' signal it sends its team.",
    z.strictObject({
      executionId: z.string(),
      taskId: z.string(),
      memberId: z.string(),
      state: z.enum(['completed', 'failed', 'handed_off', 'not_started', 'team_closed']),
      revision: z.number().int(),
      candidate: z.string().optional(),
      candidateRevision: z.number().int().optional(),
      sessionTaskId: z.string().optional(),
      excerpt: z.string().optional(),
      message: z.string().optional(),
      failure: codedError.optional().describe("a failed task's reason, as stored on the board"),
      board: BoardOutcomeFacts.optional(),
    }),
  ),
);

type ExecutionQueryResult = typeof taskExecutionQuery extends QueryDefinition<infer R, [], string> ? R : never;
export const TaskExecutionState = agrees<ExecutionQueryResult>()(
  named(
    'TaskExecutionState',
    "The 'execution' query: the execution's input and its state.",
    z.strictObject({ ...TaskExecutionInput.shape, state: z.string(), sessionTaskId: z.string().optional() }),
  ),
);

// The catalogue: every workflow and every handler, with the schemas of what it takes and answers ------------------

/** One signal, update or query of a workflow: its name (the handler definition's own) and its schemas. */
export interface MessageSchema {
  readonly kind: 'signal' | 'update' | 'query';
  readonly name: string;
  /** The handler definition of contract/messages.ts that the workflow registers. */
  readonly definition: { readonly type: string; readonly name: string };
  /** What it is for and who sends it. */
  readonly description: string;
  /** The one argument it takes, if any. */
  readonly input?: z.ZodType;
  /** What an update or a query answers. */
  readonly result?: z.ZodType;
}

export interface WorkflowSchema {
  /** `session`, `orchestrator`, `team`, `task-execution`: the name of its JSON Schema file in docs/schema/. */
  readonly kind: string;
  readonly workflowType: string;
  readonly workflowId: string;
  readonly description: string;
  readonly input: z.ZodType;
  readonly result: z.ZodType;
  readonly messages: readonly MessageSchema[];
}

type Mismatch<A, B> = Same<A, B> extends true ? [] : [{ schema: Plain<A>; definition: Plain<B> }];

/** An update, tied to its definition: the schemas must be exactly its argument and its result. */
function update<R, A extends unknown[], I extends z.ZodType | undefined, O extends z.ZodType>(
  definition: UpdateDefinition<R, A>,
  schemas: { input: I; result: O; description: string },
  ..._mismatch: [...Mismatch<I extends z.ZodType ? [z.output<I>] : [], A>, ...Mismatch<z.output<O>, R>]
): MessageSchema {
  return { kind: 'update', name: definition.name, definition, ...schemas };
}

function signal<A extends unknown[], I extends z.ZodType>(
  definition: SignalDefinition<A>,
  schemas: { input: I; description: string },
  ..._mismatch: Mismatch<[z.output<I>], A>
): MessageSchema {
  return { kind: 'signal', name: definition.name, definition, ...schemas };
}

function query<R, O extends z.ZodType>(
  definition: QueryDefinition<R>,
  schemas: { result: O; description: string },
  ..._mismatch: Mismatch<z.output<O>, R>
): MessageSchema {
  return { kind: 'query', name: definition.name, definition, ...schemas };
}

export const WORKFLOWS: readonly WorkflowSchema[] = [
  {
    kind: 'session',
    workflowType: SESSION_WORKFLOW_TYPE,
    workflowId: 'session/<sessionId>',
    description: 'One agent session: a queue of tasks, a turn per task in its own worktree; it stays open when idle.',
    input: SessionWorkflowInput,
    result: SessionStatusView,
    messages: [
      update(createUpdate, {
        input: CreateRequest,
        result: CreateResult,
        description: 'Binds the caller to the session, optionally with a first task: sent with update-with-start, update id = requestId.',
      }),
      update(sendUpdate, { input: SendInput, result: SendResult, description: 'Queues a task; answered once it is stored.' }),
      signal(sendSignal, { input: SendInput, description: 'Queues a task, fire-and-forget; a refusal is counted in status().refusedSignals.' }),
      update(cancelUpdate, {
        input: CancelInput,
        result: SessionStatusView,
        description: 'Closes the session: the running turn is cancelled, queued tasks never run.',
      }),
      update(resolveHoldUpdate, { input: ResolveHoldInput, result: ResolveHoldResult, description: "Resolves an isolated child's verification hold." }),
      update(setBudgetUpdate, {
        input: SetBudgetInput,
        result: BudgetView,
        description: "Raises or sets the session's token budget; queued tasks waiting for budget run.",
      }),
      query(statusQuery, { result: SessionStatusView, description: 'The session: status, current task, queue, task records, limits.' }),
      query(transcriptRefsQuery, { result: TranscriptRefs, description: 'The execution id and turn refs its transcript rows are keyed by.' }),
    ],
  },
  {
    kind: 'orchestrator',
    workflowType: ORCHESTRATOR_WORKFLOW_TYPE,
    workflowId: 'orchestrator/<orchestratorId>',
    description: 'The parent of a fleet of child sessions: routes user messages to them through its model.',
    input: OrchestratorWorkflowInput,
    result: OrchestratorStatusView,
    messages: [
      update(messageUpdate, { input: MessageInput, result: MessageResult, description: 'A user message: accepted with its id, answered by a turn.' }),
      signal(messageSignal, { input: MessageInput, description: 'A user message, fire-and-forget, deduplicated by requestId.' }),
      signal(childTurnEndedSignal, { input: ChildTurnEnded, description: "A child's turn end (sent by the child session)." }),
      query(orchestratorStatusQuery, { result: OrchestratorStatusView, description: 'The ledger of children, the turns and the queue.' }),
      query(rosterQuery, { result: RosterText, description: 'The exact roster text the model gets now.' }),
      query(orchestratorStartQuery, { result: StartOrchestratorInput, description: 'The settings it was started with.' }),
      update(fundChildUpdate, {
        input: FundChildInput,
        result: BudgetView,
        description: "Carves a child's budget raise from the orchestrator's (sent by the child).",
      }),
      update(setBudgetUpdate, {
        input: SetBudgetInput,
        result: BudgetView,
        description: "Raises or sets the orchestrator's token budget; messages that waited for budget run.",
      }),
    ],
  },
  {
    kind: 'team',
    workflowType: TEAM_WORKFLOW_TYPE,
    workflowId: 'team/<teamId>',
    description: 'A team run: a Coordinator over Members working the tasks of a board, delivered with a certificate.',
    input: TeamWorkflowInput,
    result: TeamStatusView,
    messages: [
      update(teamMessageUpdate, {
        input: MessageInput,
        result: MessageResult,
        description: 'A user message to the Coordinator, answered by a Coordinator turn.',
      }),
      signal(teamMessageSignal, { input: MessageInput, description: 'A user message, fire-and-forget, deduplicated by requestId.' }),
      update(reassignTaskUpdate, {
        input: ReassignInput,
        result: ReceiptView,
        description: 'Hands a task over to another Member; answers the handoff receipt.',
      }),
      update(cancelTaskUpdate, { input: CancelTaskInput, result: CancelTaskResult, description: "Removes a task from the run's scope." }),
      update(resolveHandoffUpdate, { input: ResolveHandoffInput, result: ReceiptView, description: 'Resolves a timed-out or unknown handoff.' }),
      update(pauseTeamUpdate, {
        input: TeamLifecycleInput,
        result: TeamLifecycleResult,
        description: 'Pauses the team: no Coordinator turn or execution starts; running work is fenced and its tasks wait, pending, for their owners.',
      }),
      update(resumeTeamUpdate, { input: TeamLifecycleInput, result: TeamLifecycleResult, description: 'Resumes a paused team.' }),
      update(archiveTeamUpdate, {
        input: TeamLifecycleInput,
        result: TeamLifecycleResult,
        description: 'Abandons the whole run: running work stopped, open tasks cancelled, sessions closed; the run ends cancelled (or failed).',
      }),
      update(verifyTeamUpdate, {
        input: VerifyTeamInput,
        result: VerifyTeamResult,
        description: 'Runs the verify command again on the certified tree: whether it still passes and its output matches.',
      }),
      update(mergeTeamUpdate, {
        input: undefined,
        result: TeamMergeResult,
        description: 'Merges the certified result into the protected branch; refused not_delivered without a certificate.',
      }),
      signal(teamFactSignal, { input: TeamFact, description: 'A fact committed outside the run (sent by Orchard itself).' }),
      signal(childTurnEndedSignal, { input: ChildTurnEnded, description: "A Member session's turn end (sent by the session)." }),
      signal(taskExecutionSettledSignal, { input: TaskExecutionSettled, description: "A task execution's end (sent by its workflow)." }),
      query(teamStatusQuery, {
        result: TeamStatusView,
        description: 'Revisions, members, executions, Coordinator turns, replies, refusals, receipts, certificate.',
      }),
      query(teamStartQuery, { result: StartTeamInput, description: 'The settings it was started with.' }),
      update(fundChildUpdate, {
        input: FundChildInput,
        result: BudgetView,
        description: "Carves a Member session's budget raise from the team's (sent by the session).",
      }),
      update(setBudgetUpdate, {
        input: SetBudgetInput,
        result: BudgetView,
        description: "Raises or sets the team's token budget; work that waited for budget goes on.",
      }),
    ],
  },
  {
    kind: 'task-execution',
    workflowType: TASK_EXECUTION_WORKFLOW_TYPE,
    workflowId: 'team/<teamId>/task/<taskId>/<executionId>',
    description: "One dispatch of a team's task to a Member's session, started by the team run (read it; do not start or signal it).",
    input: TaskExecutionInput,
    result: TaskExecutionSettled,
    messages: [
      signal(executionTurnEndedSignal, { input: ChildTurnEnded, description: "A turn end of the Member's session, forwarded by the team." }),
      query(taskExecutionQuery, { result: TaskExecutionState, description: 'The execution: task, member, session and state.' }),
    ],
  },
];
