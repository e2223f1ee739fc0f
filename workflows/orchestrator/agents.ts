/**
 * What `list_orchestrator_agents` answers (issue 8, items 4 and 8), built by one pure function from the authority
 * ledger, what Temporal says of each child's workflow now, and the Postgres routing cache. Only the ledger makes
 * a child actionable: a cache row for a child the ledger does not hold is listed as untrusted and never
 * actionable, whatever it claims.
 */
import type { ChildInspection, Liveness, RoutingCacheRow } from '../../contract/orchestrator-activities';
import type { LedgerChild } from './ledger';

export interface AgentRow {
  readonly childId: string;
  readonly title: string;
  readonly agent: string;
  readonly routingDescription: string | null;
  readonly routingAliases: readonly string[];
  readonly status: string;
  readonly liveness: Liveness;
  readonly runtime: string;
  /** The ledger and the live workflow disagree (a routable child whose workflow is gone), or liveness is unknown. */
  readonly stale: boolean;
  /** Work can be routed to it now: the ledger holds it as running or idle and its workflow is alive. */
  readonly actionable: boolean;
  /** An operator can attach to it (its workflow runs: Web UI, `orchard session status`). */
  readonly attachable: boolean;
  /** Why it is not actionable; null when it is. */
  readonly reason: string | null;
}

export const UNTRUSTED = 'routing_metadata_untrusted';

function reasonFor(status: string, liveness: Liveness): string | null {
  if (status === 'failed') return 'child_failed';
  if (status === 'cancelled') return 'child_cancelled';
  if (liveness === 'dead') return 'child_workflow_closed';
  if (liveness === 'unknown') return 'liveness_unknown';
  return null;
}

export function agentRows(ledger: readonly LedgerChild[], inspected: readonly ChildInspection[], cache: readonly RoutingCacheRow[]): AgentRow[] {
  const live = (childId: string): ChildInspection => inspected.find((i) => i.childId === childId) ?? { childId, liveness: 'unknown', runtime: 'not inspected' };
  const rows: AgentRow[] = ledger
    .filter((c) => !c.system)
    .map((c) => {
      const { liveness, runtime } = live(c.childId);
      const routable = c.status === 'running' || c.status === 'idle';
      const reason = reasonFor(c.status, liveness);
      return {
        childId: c.childId,
        title: c.title,
        agent: c.agent,
        routingDescription: c.routingDescription ?? null,
        routingAliases: c.routingAliases,
        status: c.status,
        liveness,
        runtime,
        stale: (routable && liveness === 'dead') || liveness === 'unknown',
        actionable: reason === null,
        attachable: liveness === 'alive',
        reason,
      };
    });
  const known = new Set(ledger.map((c) => c.childId));
  for (const row of cache.filter((r) => !known.has(r.childId))) {
    const { liveness, runtime } = live(row.childId);
    rows.push({
      childId: row.childId,
      title: row.title,
      agent: row.agent,
      routingDescription: row.routingDescription ?? null,
      routingAliases: row.routingAliases,
      status: row.status,
      liveness,
      runtime,
      stale: true,
      actionable: false,
      attachable: liveness === 'alive',
      reason: UNTRUSTED,
    });
  }
  return rows;
}
