import { AsyncLocalStorage } from 'node:async_hooks';
import { Context } from '@temporalio/activity';
import { Counter, Histogram, Registry } from 'prom-client';
import { ERROR_CODES } from '../contract/errors';
import type { ReceiptState } from '../contract/team-activities';
import type { ToolProfile } from '../contract/tools';
import { GUARD_REASON_CODES } from './bash/guard';

/**
 * Orchard's own Prometheus metrics (docs/operations.md, "Metrics"), counted by the activities that record each event.
 * One registry per process, each metric registered once when this module loads: every worker a process starts (tests
 * start many) counts into the same metrics, and the worker's `/metrics` serves them (worker/metrics-server.ts).
 *
 * No label carries content. Every label value is a typed code or a kind from a closed set, and a value outside its
 * set is counted as `other`: never a prompt, an output, a command, a path, an id or a file's text.
 */
export const metricsRegistry = new Registry();

/** Who a model call or a refused tool call was for. */
type RoleKind = 'session' | 'orchestrator' | 'coordinator';

/** Typed codes a Coordinator's tool call is refused with that are not (yet) error codes of the contract. */
const COORDINATOR_REFUSALS = ['tool_not_allowed', 'coordinator_no_new_work_facts', 'completion_refused', 'message_purpose_invalid', 'run_delivered'];

const REFUSAL_REASONS: ReadonlySet<string> = new Set<string>([...GUARD_REASON_CODES, ...ERROR_CODES, ...COORDINATOR_REFUSALS]);

/** A refusal code as a label: one of the closed set, else `other`. */
const reasonLabel = (code: string): string => (REFUSAL_REASONS.has(code) ? code : 'other');

const toolRefusals = new Counter({
  name: 'orchard_tool_refusals_total',
  help: "Tool calls refused before they ran, by the refusal's typed reason (a guard reason or an error code) and who called",
  labelNames: ['role', 'reason'] as const,
  registers: [metricsRegistry],
});

const verificationHolds = new Counter({
  name: 'orchard_sandbox_verification_holds_total',
  help: "Isolated children's commands that changed what they must not: the worktree is held until a user resolves it",
  registers: [metricsRegistry],
});

const coordinatorObservations = new Counter({
  name: 'orchard_coordinator_observations_total',
  help: 'Coordinator reads of its board (task_list), by result: new_facts, or no_new_work_facts (refused: nothing changed since its last read)',
  labelNames: ['result'] as const,
  registers: [metricsRegistry],
});

const coordinatorTurnEnds = new Counter({
  name: 'orchard_coordinator_turn_ends_total',
  help: 'Coordinator turns that ended with a final answer, by outcome: finished (it committed a fact), or waiting_for_org_event (no progress)',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

const wakeEvents = new Histogram({
  name: 'orchard_wake_coalesced_events',
  help: 'Events coalesced into one wake: work facts into one Coordinator turn, child results into one orchestrator manifest',
  labelNames: ['kind'] as const,
  buckets: [1, 2, 3, 5, 10, 20, 50],
  registers: [metricsRegistry],
});

const handoffOutcomes = new Counter({
  name: 'orchard_handoff_outcomes_total',
  help: 'Handoff receipts that reached a settled state: released, timeout, unknown or failed',
  labelNames: ['outcome'] as const,
  registers: [metricsRegistry],
});

const handoffSeconds = new Histogram({
  name: 'orchard_handoff_duration_seconds',
  help: 'Seconds from the fence (the receipt written) to the receipt reaching a settled state, by that state',
  labelNames: ['outcome'] as const,
  buckets: [0.25, 0.5, 1, 2, 5, 10, 20, 60, 300],
  registers: [metricsRegistry],
});

const handoffSloMisses = new Counter({
  name: 'orchard_handoff_slo_misses_total',
  help: 'Handoffs whose old execution was not released within the SLO (5 s by default)',
  registers: [metricsRegistry],
});

const certificateValidations = new Counter({
  name: 'orchard_certificate_validations_total',
  help: 'Completion requests (org_run_complete) validated against the board, by result: issued, already_issued or refused',
  labelNames: ['result'] as const,
  registers: [metricsRegistry],
});

const modelTokens = new Counter({
  name: 'orchard_model_tokens_total',
  help: "Tokens of model calls as the provider reported them, by type (prompt, completion) and the caller's role kind",
  labelNames: ['type', 'role'] as const,
  registers: [metricsRegistry],
});

const storeQueries = new Counter({
  name: 'orchard_store_queries_total',
  help: "PostgreSQL statements the worker's pool sent, by origin (host_heartbeat, lease_renewal, activity, worker) and the activity type that sent them",
  labelNames: ['origin', 'activity'] as const,
  registers: [metricsRegistry],
});

/** Statements sent in the background of a worker, not on behalf of one activity's own work. */
export type StoreOrigin = 'host_heartbeat' | 'lease_renewal';

const storeOrigin = new AsyncLocalStorage<StoreOrigin>();

/** The activity type whose attempt is running here, if any. */
function activityType(): string | undefined {
  try {
    return Context.current().info.activityType;
  } catch {
    return undefined;
  }
}

const roleOf = (profile: ToolProfile): RoleKind => (profile === 'orchestrator' || profile === 'coordinator' ? profile : 'session');

const SETTLED: readonly ReceiptState[] = ['released', 'timeout', 'unknown', 'failed'];

/** What the activities count. Each function takes typed values only; labels are derived here, from closed sets. */
export const metrics = {
  /** A tool call was refused before it ran (the guard, the hold, the arguments, the allowlist, the fence …). */
  toolRefused(profile: ToolProfile, reason: string): void {
    toolRefusals.inc({ role: roleOf(profile), reason: reasonLabel(reason) });
    if (profile === 'coordinator' && reason === 'coordinator_no_new_work_facts') coordinatorObservations.inc({ result: 'no_new_work_facts' });
  },
  /** A command's verification found a change outside the child's allowance; the worktree is now held. */
  verificationHeld(): void {
    verificationHolds.inc();
  },
  /** The Coordinator read a board that changed since its last read. */
  coordinatorObserved(): void {
    coordinatorObservations.inc({ result: 'new_facts' });
  },
  /** A Coordinator turn's final answer: whether the turn committed a fact of its own. */
  coordinatorTurnEnded(progressed: boolean): void {
    coordinatorTurnEnds.inc({ outcome: progressed ? 'finished' : 'waiting_for_org_event' });
  },
  /** One wake (a Coordinator turn, an orchestrator manifest) stands for this many events. */
  wakeCoalesced(kind: 'coordinator' | 'orchestrator', events: number): void {
    wakeEvents.observe({ kind }, events);
  },
  /** A receipt moved (a real change, not a repeat): its new state, the time since its fence, whether it just missed the SLO. */
  receiptMoved(to: ReceiptState, elapsedMs: number, missedSlo: boolean): void {
    if (missedSlo) handoffSloMisses.inc();
    if (!SETTLED.includes(to)) return;
    handoffOutcomes.inc({ outcome: to });
    handoffSeconds.observe({ outcome: to }, Math.max(0, elapsedMs) / 1000);
  },
  certificateValidated(result: 'issued' | 'already_issued' | 'refused'): void {
    certificateValidations.inc({ result });
  },
  /**
   * One statement sent by a pool made with `onQuery: metrics.storeQueried` (the worker's): attributed to the origin
   * `withStoreOrigin` set around it, else to the activity whose attempt sent it, else to the worker itself (startup,
   * sweeps). Its activity label is the activity type (a name from the code, never an id) or `none`.
   */
  storeQueried(): void {
    const activity = activityType();
    storeQueries.inc({ origin: storeOrigin.getStore() ?? (activity ? 'activity' : 'worker'), activity: activity ?? 'none' });
  },
  /** Runs `fn` with every statement it sends (synchronously or later in its async chain) counted under `origin`. */
  withStoreOrigin<T>(origin: StoreOrigin, fn: () => T): T {
    return storeOrigin.run(origin, fn);
  },
  /** A model call's usage, counted once (when its record was first stored). */
  modelTokens(profile: ToolProfile, usage: { promptTokens: number; completionTokens: number } | undefined): void {
    if (!usage) return;
    const role = roleOf(profile);
    if (usage.promptTokens > 0) modelTokens.inc({ type: 'prompt', role }, usage.promptTokens);
    if (usage.completionTokens > 0) modelTokens.inc({ type: 'completion', role }, usage.completionTokens);
  },
};
