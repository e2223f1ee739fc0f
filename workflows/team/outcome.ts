/**
 * A team run's outcome (issue 22): one pure function of the board, the handoff receipts and the certificate, so the
 * status query, `orchard team status`, the Web UI and the `OrchardStatus` search attribute say the same thing. It
 * runs in the workflow sandbox (no I/O, no clock); the board's part is summarised where the board is read
 * (`boardOutcomeFacts`, by the store's activities and `orchard board check`) and travels with their answers.
 *
 *   - `delivered`: a completion certificate was issued;
 *   - `cancelled`: the user's word only — the run was archived with nothing left failed or unknown, or users
 *     removed every task from scope (a board the Coordinator cancelled is not the user's abandonment);
 *   - `failed`: archived with unresolved failed or unknown work (a failed task nothing replaced, a handoff that
 *     settled timeout/unknown/failed and no user resolved);
 *   - `needs_attention`: nothing can progress without a person — a handoff waiting for a user's resolution, or,
 *     once the run is quiet (no Coordinator turn due or running, no execution running), a failed task the
 *     Coordinator has not replaced or a completion it was refused;
 *   - `running`: anything else.
 */
import type { BoardOutcomeFacts, TeamOutcome } from '../../contract/messages';
import { validateClosure, type BoardSnapshot, type HandoffResolution, type HandoffState } from './closure';

export function boardOutcomeFacts(board: BoardSnapshot, closure = validateClosure(board)): BoardOutcomeFacts {
  const replaced = new Set(board.tasks.flatMap((t) => (t.replacesTaskId === undefined ? [] : [t.replacesTaskId])));
  const failedUnreplaced = board.tasks
    .filter((t) => t.status === 'failed' && !replaced.has(t.id))
    .map((t) => t.id)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return { failedUnreplaced, userRemovedAll: closure.outcome === 'cancelled' };
}

export interface OutcomeFacts {
  readonly certified: boolean;
  /** A user archived the run (whole-episode abandonment). */
  readonly archived: boolean;
  /** The board as last assessed; absent before any assessment. */
  readonly board?: BoardOutcomeFacts;
  readonly handoffs: readonly { readonly receiptId: string; readonly state: HandoffState; readonly resolution?: HandoffResolution }[];
  /** No Coordinator turn is due or running and no execution or handoff driver runs: only a new event moves the run. */
  readonly quiet: boolean;
  /** The Coordinator's completion request was refused and no fact has been committed since. */
  readonly completionRefused: boolean;
}

export interface OutcomeView {
  readonly outcome: TeamOutcome;
  /** Why, for `needs_attention` and `failed`: short lines naming the tasks and receipts. */
  readonly because: readonly string[];
}

const BLOCKING: readonly HandoffState[] = ['timeout', 'unknown', 'failed'];

export function teamOutcome(f: OutcomeFacts): OutcomeView {
  if (f.certified) return { outcome: 'delivered', because: [] };
  const blocked = f.handoffs.filter((h) => BLOCKING.includes(h.state) && h.resolution === undefined);
  const failed = f.board?.failedUnreplaced ?? [];
  const unresolved = [
    ...failed.map((id) => `task ${id} failed and nothing replaces it`),
    ...blocked.map((h) => `handoff ${h.receiptId} is ${h.state} and no user resolved it`),
  ];
  if (f.archived) return unresolved.length > 0 ? { outcome: 'failed', because: unresolved } : { outcome: 'cancelled', because: [] };
  if (f.board?.userRemovedAll) return { outcome: 'cancelled', because: [] };
  if (blocked.length > 0) return { outcome: 'needs_attention', because: unresolved };
  if (f.quiet && (failed.length > 0 || f.completionRefused)) {
    return { outcome: 'needs_attention', because: [...unresolved, ...(f.completionRefused ? ['the completion request was refused'] : [])] };
  }
  return { outcome: 'running', because: [] };
}
