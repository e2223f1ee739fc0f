import {
  ActivityFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  uuid4,
  workflowInfo,
} from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import type { SharedActivities } from '../../contract/activities';
import type { CallRef, ReadCallResult, SessionCallView } from '../../contract/orchestrator-activities';
import { DISPATCH_OPTIONS, MODEL_ACTIVITY_OPTIONS, STORE_LOCAL_OPTIONS, STORE_OPTIONS, failureOf } from '../activity-options';
import { orchardFailure } from '../../contract/failures';
import {
  childTurnEndedSignal,
  DEFAULT_LIMITS,
  messageProblem,
  messageSignal,
  messageUpdate,
  orchestratorStartQuery,
  orchestratorStatusQuery,
  resolveLimits,
  rosterQuery,
  type ChildTurnEnded,
  type MessageInput,
  type MessageResult,
  type OrchestratorDelivery,
  type OrchestratorStatusView,
  type OrchestratorWorkflowInput as OrchestratorWorkflowInputOf,
  type TurnRef,
} from '../../contract/messages';
import { ORCHARD_HOST, ORCHARD_KIND, ORCHARD_STATUS } from '../../contract/search-attributes';
import { slugOf } from '../../contract/ids';
import { excerpt } from '../session/state';
import { agentRows } from './agents';
import { orchestratorDetails } from '../current-details';
import { parseDescriptionCall, ROUTING_CAPS_BEFORE_ISSUE_18, sameChange } from './descriptions';
import { dispatchEcho } from './echo';
import { Ledger, type CarriedLedger, type ChildResult } from './ledger';
import { renderRoster } from './roster';
import { dispatchRequestId } from './session-call';
import { topicKey } from './topic';
import { Budget, type CarriedBudget } from '../budget';
import { registerParentBudget } from '../parent-budget';
import { patchEpoch } from '../patch-epoch';

/** A message waiting for an orchestrator turn: a user's, or the manifest of child results that arrived. */
interface QueuedMessage {
  readonly messageId: string;
  readonly kind: 'user' | 'manifest';
  readonly excerpt: string;
  /**
   * False while its text is being stored: it holds its place in the queue (arrival order) but no turn takes it yet.
   * Absent (runs before this field, and every carried message) means stored.
   */
  readonly stored?: boolean;
}

interface CarriedOrchestratorState {
  readonly executionId: string;
  readonly ledger: CarriedLedger;
  readonly queue: readonly QueuedMessage[];
  readonly pendingResults: readonly ChildResult[];
  readonly nextMessageSeq: number;
  readonly turnsCompleted: number;
  readonly runIndex: number;
  readonly seenRequests: readonly (readonly [string, string])[];
  readonly turns: readonly TurnRef[];
  readonly deliveries: readonly OrchestratorDelivery[];
  /** Absent in state carried before budgets. */
  readonly budget?: CarriedBudget;
}

/** The input as this code reads it: its carried state is this code's. */
type OrchestratorWorkflowInput = OrchestratorWorkflowInputOf<CarriedOrchestratorState>;

const DEDUPE_WINDOW = 500;
const TURN_REFS_KEPT = 50;
const DELIVERIES_KEPT = 200;

/**
 * The orchestrator (`orchestrator/<id>`): a long-lived session that routes each user message to the child that
 * owns its topic. Its children are independent session workflows (they outlive any run of this one); its ledger
 * of them is the only authority on routing, and the roster built from it goes into every model request.
 */
export async function orchestratorSession(input: OrchestratorWorkflowInput): Promise<OrchestratorStatusView> {
  // Every patch below, as one marker for runs that begin on this code (workflows/patch-epoch.ts).
  const since = patchEpoch('orchestrator-patches-2026-12');
  const { start, carried } = input;
  const info = workflowInfo();
  const ledger = new Ledger(carried?.ledger);
  const executionId = carried?.executionId ?? uuid4();
  const queue: QueuedMessage[] = [...(carried?.queue ?? [])];
  // Child results waiting for the next idle moment, delivered to the model as one manifest.
  let pendingResults: ChildResult[] = [...(carried?.pendingResults ?? [])];
  let nextMessageSeq = carried?.nextMessageSeq ?? 1;
  let turnsCompleted = carried?.turnsCompleted ?? 0;
  let turnsThisRun = 0;
  const runIndex = carried ? carried.runIndex + 1 : 0;
  const seenRequests: [string, string][] = (carried?.seenRequests ?? []).map(([r, m]) => [r, m]);
  const turns: TurnRef[] = [...(carried?.turns ?? [])];
  const deliveries: OrchestratorDelivery[] = [...(carried?.deliveries ?? [])];
  let current: { messageId: string; turn: number } | undefined;
  const limits = resolveLimits(start.limits);
  // Its own model calls spend from it; each child's budget is carved from it (escrow) and given back when it closes.
  const budget = new Budget(carried?.budget ?? { limit: start.budgetTokens, spent: 0 });

  // Store writes are regular activities: message handlers run beside the main loop, and local activities that
  // overlap are resolved one activation at a time live but together on replay, which reorders the coroutines'
  // commands (a nondeterminism error). An activity's completion is a history event, delivered in the same workflow
  // task both times. Histories recorded before this patch keep local activities.
  const storeActs = since('orchestrator-store-activities')
    ? proxyActivities<SharedActivities>({ ...STORE_OPTIONS, summary: 'orchestrator store' })
    : proxyLocalActivities<SharedActivities>({ ...STORE_LOCAL_OPTIONS, summary: 'orchestrator store' });
  const model = proxyActivities<SharedActivities>({ ...MODEL_ACTIVITY_OPTIONS, summary: 'orchestrator' });
  // Tool calls read from and recorded to the transcript.
  const calls = proxyActivities<SharedActivities>({ ...STORE_OPTIONS, summary: 'orchestrator' });
  // Children created, sent to and inspected through Temporal.
  const dispatch = proxyActivities<SharedActivities>({ ...DISPATCH_OPTIONS, summary: 'orchestrator' });
  // Request ids whose message is being stored now: a concurrent duplicate waits for the first's outcome.
  const storing: string[] = [];
  let refusedSignals = 0;

  setHandler(messageUpdate, (message) => accept(message), {
    description: 'A user message: accepted with its id (a repeated requestId is accepted once), answered by a turn.',
    validator: (message) => {
      const problem = messageProblem(message) ?? (isKnownRequest(message.requestId) ? undefined : queueRefusal(message.text.length));
      if (problem) throw orchardFailure(problem.code, problem.message);
    },
  });
  setHandler(
    messageSignal,
    async (message) => {
      const problem = messageProblem(message) ?? (isKnownRequest(message.requestId) ? undefined : queueRefusal(message.text.length));
      if (problem) {
        refusedSignals += 1;
        return log.info('message signal refused', { code: problem.code, reason: problem.message });
      }
      // A signal cannot be answered: a refusal (a store that failed for good) is counted in the status, never a
      // failure of the orchestrator.
      await accept(message).catch((err: unknown) => {
        refusedSignals += 1;
        log.warn('message signal not accepted', { requestId: message.requestId, error: String(err) });
      });
    },
    { description: 'Fire-and-forget `message`.' },
  );
  setHandler(
    childTurnEndedSignal,
    (notice) => {
      // Counted once per (child, turn): a redelivered notice changes nothing. A group member's result waits for
      // the rest of its group.
      const ready = ledger.turnEnded(notice);
      if (ready) pendingResults.push(...ready);
      budget.childReported(notice);
      publish();
    },
    { description: "A child's turn ended (sent by the child session)." },
  );
  registerParentBudget(budget, 'orchestrator', () => publish());
  setHandler(orchestratorStatusQuery, () => view(), { description: 'The ledger of children, the turns and the queue.' });
  setHandler(rosterQuery, () => renderRoster(ledger.children), { description: 'The exact roster text the model gets now.' });
  setHandler(orchestratorStartQuery, () => start, { description: 'The settings this orchestrator was started with: repo, host, title, models, limits.' });

  /** A request id already accepted or being accepted: its retry is answered, whatever the queue's state. */
  function isKnownRequest(requestId: string | undefined): boolean {
    return requestId !== undefined && (storing.includes(requestId) || seenRequests.some(([r]) => r === requestId));
  }

  /**
   * Why a message of `length` characters cannot be queued now: the queue is at its cap, or this run's history is at
   * its budget (the text reaches history twice: the message, and the store activity's input). Both pass with time.
   */
  function queueRefusal(length: number): { code: 'queue_full'; message: string } | undefined {
    if (queue.length >= limits.maxQueuedTasks) {
      return {
        code: 'queue_full',
        message: `orchestrator ${start.orchestratorId} has ${queue.length} messages queued (limit ${limits.maxQueuedTasks}): retry after some have run`,
      };
    }
    if (workflowInfo().historySize + 2 * length > limits.historyBudgetBytes) {
      return {
        code: 'queue_full',
        message: `this run of orchestrator ${start.orchestratorId} is at its history budget; it continues-as-new at its next turn boundary: retry shortly`,
      };
    }
    return undefined;
  }

  async function accept(message: MessageInput): Promise<MessageResult> {
    if (!since('orchestrator-accept-reserved')) return acceptStoringFirst(message);
    const requestId = message.requestId;
    if (requestId !== undefined && storing.includes(requestId)) await condition(() => !storing.includes(requestId));
    const seen = requestId === undefined ? undefined : seenRequests.find(([r]) => r === requestId);
    if (seen) return { messageId: seen[1], duplicate: true };
    // Reserve: an id and a place in the queue now, in arrival order; no turn takes it until its text is stored.
    const seq = nextMessageSeq++;
    const messageId = `m${seq}`;
    if (requestId !== undefined) storing.push(requestId);
    enqueueUser({ messageId, kind: 'user', excerpt: excerpt(message.text), stored: false });
    publish();
    try {
      await storeActs.storeTasks([{ executionId, sessionId: start.orchestratorId, taskId: messageId, task: message.text, requestId }]);
    } catch (err) {
      // Release: nothing was accepted, so a retry with the same request id is a first attempt, not a duplicate. (The
      // queue is changed in place, never replaced: the main loop may hold it across an await.)
      const at = queue.findIndex((q) => q.messageId === messageId);
      if (at >= 0) queue.splice(at, 1);
      if (requestId !== undefined) storing.splice(storing.indexOf(requestId), 1);
      publish();
      throw orchardFailure(
        'store_unavailable',
        `the message could not be stored, so it was not accepted: ${err instanceof ActivityFailure ? failureOf(err).message : String(err)}`,
      );
    }
    // Commit: the message counts (a confirmation token in it too) and its request id answers every retry.
    const at = queue.findIndex((q) => q.messageId === messageId);
    if (at >= 0) queue[at] = { messageId, kind: queue[at].kind, excerpt: queue[at].excerpt };
    ledger.userSaid(message.text, seq, messageId);
    if (requestId !== undefined) {
      seenRequests.push([requestId, messageId]);
      if (seenRequests.length > DEDUPE_WINDOW) seenRequests.shift();
      storing.splice(storing.indexOf(requestId), 1);
    }
    publish();
    return { messageId, duplicate: false };
  }

  /** Histories recorded before reserve → store → commit: the dedupe entry went in before the store write. */
  async function acceptStoringFirst(message: MessageInput): Promise<MessageResult> {
    const seen = message.requestId === undefined ? undefined : seenRequests.find(([r]) => r === message.requestId);
    if (seen) return { messageId: seen[1], duplicate: true };
    const seq = nextMessageSeq++;
    const messageId = `m${seq}`;
    ledger.userSaid(message.text, seq, messageId);
    if (message.requestId !== undefined) {
      seenRequests.push([message.requestId, messageId]);
      if (seenRequests.length > DEDUPE_WINDOW) seenRequests.shift();
    }
    await storeActs.storeTasks([{ executionId, sessionId: start.orchestratorId, taskId: messageId, task: message.text, requestId: message.requestId }]);
    enqueueUser({ messageId, kind: 'user' as const, excerpt: excerpt(message.text) });
    publish();
    return { messageId, duplicate: false };
  }

  /** A user message goes before any manifest still waiting. */
  function enqueueUser(entry: QueuedMessage): void {
    const firstManifest = queue.findIndex((q) => q.kind === 'manifest');
    if (firstManifest < 0) queue.push(entry);
    else queue.splice(firstManifest, 0, entry);
  }

  /** The next message may start a turn: it is stored (one still being stored holds its place, and the ones behind it). */
  const nextReady = () => queue.length > 0 && queue[0].stored !== false && !budget.exhausted;

  function view(): OrchestratorStatusView {
    return {
      orchestratorId: start.orchestratorId,
      status: current || queue.length > 0 ? 'progressing' : 'idle',
      children: ledger.children,
      turnsCompleted,
      queued: queue.length,
      ...(refusedSignals > 0 ? { refusedSignals } : {}),
      lastTurn: turns[turns.length - 1],
      turns,
      deliveries,
      groups: ledger.groups.map(({ results: _held, ...group }) => group),
      proposals: ledger.proposals.map(({ afterSeq: _seq, ...proposal }) => proposal),
      runIndex,
      budget: budget.view(true),
    };
  }

  function publish(): void {
    const v = view();
    const desired: SearchAttributeUpdatePair[] = [
      { key: ORCHARD_KIND, value: 'orchestrator' },
      { key: ORCHARD_STATUS, value: v.status },
      { key: ORCHARD_HOST, value: start.host },
    ];
    const now = workflowInfo().typedSearchAttributes;
    const changed = desired.filter((pair) => now.get(pair.key) !== pair.value);
    if (changed.length > 0) upsertSearchAttributes(changed);
    setCurrentDetails(orchestratorDetails(v, ledger.children));
  }

  /** One tool call of the orchestrator's model, executed against the ledger; its result is what the model reads. */
  async function executeCall(ref: CallRef): Promise<string> {
    const read: ReadCallResult = await calls.readOrchestratorCall(ref);
    if (!read.ok) return `error (${read.code}): ${read.message}`;
    if (read.tool === 'list_orchestrator_agents') {
      const { inspected, cache } = await dispatch.inspectChildren({ orchestratorId: start.orchestratorId, childIds: ledger.children.map((c) => c.childId) });
      return JSON.stringify(agentRows(ledger.children, inspected, cache));
    }
    if (read.tool === 'update_orchestrator_agent_description' && 'args' in read) return updateDescription(read.args);
    if (read.tool !== 'session' || !('call' in read)) {
      return `error (tool_unknown): there is no tool ${read.tool}; your tools are session, list_orchestrator_agents and update_orchestrator_agent_description`;
    }
    const repaired = read.repaired ? `(${read.repaired})\n` : '';
    return repaired + (await executeSession(read.call, ref));
  }

  /** Proposes a routing change (a token back), or applies one the user confirmed; anything else changes nothing. */
  function updateDescription(args: Record<string, unknown>): string {
    // Caps on routing metadata came with issue 18: a call recorded before them is judged as it was then.
    const call = parseDescriptionCall(args, since('orchestrator-field-caps') ? undefined : ROUTING_CAPS_BEFORE_ISSUE_18);
    if (!call.ok) return `error (${call.code}): ${call.message}`;
    const child = ledger.get(call.sessionID);
    if (!child) return `error (session_not_found): no child ${call.sessionID} in your roster; nothing was changed`;
    if (!call.confirmed) {
      const token = `confirm-${uuid4().slice(0, 8)}`;
      ledger.propose({ token, childId: child.childId, change: call.change, afterSeq: nextMessageSeq });
      publish();
      const before = { routingDescription: child.routingDescription ?? null, routingAliases: child.routingAliases };
      return JSON.stringify({
        status: 'confirmation_required',
        childId: child.childId,
        before,
        after: { ...before, ...call.change },
        confirmationToken: token,
        next: `Nothing has changed yet. Ask the user to confirm by sending ${token}; after their message, call again with confirmed: true and confirmationToken "${token}".`,
      });
    }
    if (!call.token) return 'error (confirmation_token_missing): confirmed: true needs the confirmationToken the proposal returned; nothing was changed';
    const proposal = ledger.proposals.find((p) => p.token === call.token);
    if (!proposal) return `error (confirmation_token_unknown): ${call.token} is not a pending proposal's token; nothing was changed`;
    if (proposal.childId !== child.childId || !sameChange(proposal.change, call.change)) {
      return `error (confirmation_mismatch): ${call.token} confirms a different change (${proposal.childId}: ${JSON.stringify(proposal.change)}); nothing was changed`;
    }
    if (!proposal.confirmedBy) {
      return `error (confirmation_not_from_user): ${call.token} has not appeared in a user message since it was proposed; only the user can confirm it. Nothing was changed`;
    }
    ledger.applyProposal(proposal.token);
    publish();
    const now = ledger.get(child.childId)!;
    return JSON.stringify({
      status: 'applied',
      childId: now.childId,
      confirmedBy: proposal.confirmedBy,
      routingDescription: now.routingDescription ?? null,
      routingAliases: now.routingAliases,
    });
  }

  async function executeSession(call: SessionCallView, ref: CallRef): Promise<string> {
    const requestId = dispatchRequestId(info.workflowId, ref);
    switch (call.operation) {
      case 'list':
        return renderRoster(ledger.children);
      case 'status': {
        const child = ledger.get(call.sessionID);
        if (!child) return `error (session_not_found): no child ${call.sessionID} in your roster`;
        return JSON.stringify(child);
      }
      case 'send':
        return relay(call.sessionID, call.taskExcerpt, ref, requestId, 'send', 'sent to');
      case 'create': {
        const owner = call.topic ? ledger.ownerOfTopic(call.topic) : undefined;
        if (owner) {
          // A child that exists has its own conversation: a starting context cannot be given to it.
          const unused = call.context
            ? `${call.context === 'conversation' ? 'includeContext' : 'context'} was not used: ${owner.childId} already has its own conversation (put what it needs in the task)\n`
            : '';
          return (
            unused + (await relay(owner.childId, call.taskExcerpt, ref, requestId, 'topic', `topic "${call.topic}" is owned by ${owner.childId}: routed to`))
          );
        }
        const completion = call.completion;
        if (completion.policy === 'group') {
          const refused = ledger.groupRefusal(completion.groupId);
          if (refused) return `error (completion_group_sealed): ${refused}; no child was created`;
        }
        const childId = `${slugOf(call.title, 'child')}-${uuid4().slice(0, 6)}`;
        // Its budget is carved out of this one before it exists (escrow): a child this budget cannot fund is not created.
        const carved = budget.carve(childId, call.budgetTokens);
        if ('code' in carved) return `error (${carved.code}): ${carved.message}; no child was created`;
        // In the ledger (and its group) before its workflow starts, so a turn end that arrives with the create's
        // own result is counted, not dropped as unknown.
        ledger.add({
          childId,
          title: call.title,
          agent: call.agent ?? 'coder',
          topicKey: call.topic ? topicKey(call.topic) : undefined,
          routingDescription: call.routingDescription,
          routingAliases: [...(call.routingAliases ?? [])],
          status: 'running',
          provenance: { turn: ref.turn, callId: ref.callId },
          completion,
        });
        if (completion.policy === 'group') ledger.joinGroup(completion.groupId, childId, ref.turn);
        const creating = dispatch.createChild.executeWithOptions({ summary: `session create ${childId}` }, [
          {
            ref,
            childId,
            requestId,
            title: call.title,
            agent: call.agent,
            repo: start.repo,
            host: start.host,
            parent: info.workflowId,
            model: start.childModel,
            ...(carved.limit !== undefined ? { budgetTokens: carved.limit } : {}),
            ...(carved.funded ? { fundedBy: info.workflowId } : {}),
          },
        ]);
        // A create that failed for good (not a typed refusal the activity answers) leaves no phantom `running` row.
        const created = since('orchestrator-no-phantom-child')
          ? await creating.catch((err: unknown) => {
              ledger.remove(childId);
              budget.uncarve(childId);
              publish();
              throw err;
            })
          : await creating;
        if (!created.ok) {
          ledger.remove(childId);
          budget.uncarve(childId);
          return `error (${created.code}): ${created.message}; no child was created`;
        }
        delivered(childId, 'create', created.taskId);
        publish();
        const starts =
          call.context === 'conversation' ? '; it starts from this conversation' : call.context === 'handoff' ? '; your handoff comes before its task' : '';
        // The model plans its fleet with what is left: a funded child's budget and the remainder are in the result.
        const funding = carved.funded ? `; budget ${carved.limit} tokens carved from yours, ${budget.remaining} remain` : '';
        return `created child ${childId} (task ${created.taskId}${starts}${funding})\n${dispatchEcho(ledger.children, { childId, brief: call.taskExcerpt })}`;
      }
    }
  }

  function delivered(childId: string, via: OrchestratorDelivery['via'], taskId: string | undefined): void {
    deliveries.push({ messageId: current?.messageId ?? '', turn: current?.turn ?? 0, childId, via, taskId });
    if (deliveries.length > DELIVERIES_KEPT) deliveries.shift();
  }

  /** Relays a task to a child the ledger knows; an unknown or closed id is an error the model reads, never a create. */
  async function relay(childId: string, brief: string, ref: CallRef, requestId: string, via: OrchestratorDelivery['via'], said: string): Promise<string> {
    const child = ledger.get(childId);
    if (!child) return `error (session_not_found): no child ${childId} in your roster; nothing was created. ${renderRoster(ledger.children)}`;
    if (child.status === 'cancelled') return `error (session_closed): child ${childId} is closed; nothing was sent`;
    const sent = await dispatch.sendToChild.executeWithOptions({ summary: `session send ${childId}` }, [{ ref, childId, requestId, from: info.workflowId }]);
    if (!sent.ok) {
      if (sent.code === 'session_closed' || sent.code === 'session_not_found') ledger.closed(childId, 'cancelled');
      return `error (${sent.code}): ${sent.message}; nothing was sent`;
    }
    ledger.dispatched(childId);
    delivered(childId, via, sent.taskId);
    publish();
    return `${said} ${childId} (task ${sent.taskId})\n${dispatchEcho(ledger.children, { childId, brief })}`;
  }

  async function runTurn(message: QueuedMessage, turn: number, turnId: string): Promise<TurnRef> {
    let steps = 0;
    let toolCalls = 0;
    const keys = { sessionId: start.orchestratorId, executionId, turnId, turn };
    try {
      for (let step = 1; step <= limits.maxStepsPerTurn; step++) {
        steps = step;
        const answer = await model.modelStep.executeWithOptions({ summary: `orchestrator model call (turn ${turn}, step ${step})` }, [
          {
            ...keys,
            step,
            taskId: step === 1 ? message.messageId : undefined,
            model: start.model ?? { provider: 'default' },
            profile: 'orchestrator',
            context: { title: start.title ?? start.orchestratorId, agent: 'orchestrator', worktree: '', branch: '', roster: renderRoster(ledger.children) },
            contextChars: limits.contextChars,
            ...budget.forCall(limits.maxOutputTokens ?? DEFAULT_LIMITS.maxOutputTokens!),
          },
        ]);
        const exhausted = budget.settle(answer, `orchard orchestrator budget ${start.orchestratorId} <tokens>`);
        if (exhausted) return { turn, turnId, taskId: message.messageId, outcome: 'budget_exhausted', steps, toolCalls, error: exhausted };
        if (answer.toolCalls.length === 0) {
          // The activity stripped the scaffolding before cutting the text short (item 9).
          return { turn, turnId, taskId: message.messageId, outcome: 'finished', steps, toolCalls, finalExcerpt: answer.textExcerpt };
        }
        for (const [index, call] of answer.toolCalls.entries()) {
          const ref: CallRef = { ...keys, step, callId: call.id };
          const content = await executeCall(ref);
          await calls.recordToolResult({ ...ref, index, content });
          toolCalls += 1;
        }
      }
      return { turn, turnId, taskId: message.messageId, outcome: 'step_limit', steps, toolCalls };
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      return { turn, turnId, taskId: message.messageId, outcome: 'failed', steps, toolCalls, error: failureOf(err) };
    }
  }

  /** Child results that arrived since the last turn, as one compact manifest message. */
  async function manifest(): Promise<QueuedMessage> {
    const results = pendingResults;
    pendingResults = [];
    const messageId = `m${nextMessageSeq++}`;
    const line = (n: ChildTurnEnded, indent = '') =>
      `${indent}- ${n.childId}: ${n.closed ? `session closed (${n.outcome})` : `turn ${n.outcome}`}${n.excerpt ? ` — ${excerpt(n.excerpt, 200)}` : ''}`;
    const lines = results.flatMap((r) =>
      r.kind === 'each' ? [line(r.notice)] : [`- group ${r.groupId} complete (${r.notices.length} results):`, ...r.notices.map((n) => line(n, '  '))],
    );
    const text = [`Child results (${results.length}):`, ...lines].join('\n');
    const coalesced = { kind: 'orchestrator' as const, events: results.reduce((n, r) => n + (r.kind === 'each' ? 1 : r.notices.length), 0) };
    await storeActs.storeTasks([{ executionId, sessionId: start.orchestratorId, taskId: messageId, task: text, coalesced }]);
    return { messageId, kind: 'manifest', excerpt: excerpt(text) };
  }

  /** Writes the ledger rows changed since the last projection into the (untrusted) routing cache. */
  async function project(): Promise<void> {
    const changed = ledger.takeUnprojected();
    if (changed.length > 0) await storeActs.projectRoutingCache({ orchestratorId: start.orchestratorId, children: changed });
  }

  // A run that has done nothing yet never hands over for its size (a budget below a fresh run's history would loop).
  const handOver = () =>
    turnsThisRun >= limits.turnsPerRun ||
    workflowInfo().continueAsNewSuggested ||
    (turnsThisRun > 0 && workflowInfo().historySize >= (limits.historyBudgetBytes * 3) / 4);

  publish();
  // The worker's default budget, for a chain started without one (read once, recorded in history).
  if (!carried && start.budgetTokens === undefined && since('budget-default')) {
    const fallback = await storeActs.resolveDefaultBudget();
    if (fallback !== null) budget.setLimit(fallback);
    publish();
  }
  for (;;) {
    await project();
    await condition(() => nextReady() || (queue.length === 0 && pendingResults.length > 0) || ledger.unprojected.length > 0 || handOver());
    if (queue.length === 0 && pendingResults.length > 0) {
      // Stored first, then queued: `queue.push(await …)` would read the queue before the await.
      const results = await manifest();
      queue.push(results);
    }
    if (!nextReady() && !handOver()) continue;
    if (queue.length === 0 || handOver()) {
      await project();
      await condition(allHandlersFinished);
      await continueAsNew<typeof orchestratorSession>({
        start,
        carried: {
          executionId,
          ledger: ledger.carry(),
          queue,
          pendingResults,
          nextMessageSeq,
          turnsCompleted,
          runIndex,
          seenRequests,
          turns,
          deliveries,
          budget: budget.carry(),
        },
      });
    }
    const message = queue.shift()!;
    const turn = turnsCompleted + 1;
    current = { messageId: message.messageId, turn };
    publish();
    const ref = await runTurn(message, turn, uuid4());
    // The turn settled: the groups it opened are sealed (no late member), and may be complete already.
    pendingResults.push(...ledger.sealGroups());
    turns.push(ref);
    if (turns.length > TURN_REFS_KEPT) turns.shift();
    turnsCompleted = turn;
    turnsThisRun += 1;
    current = undefined;
    publish();
  }
}
