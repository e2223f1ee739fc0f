/**
 * The roster (invariants 1 and 2): the orchestrator's routable children as it sees them on every model request
 * and in every create/send result. Built by this one pure function from the authority ledger, so the request
 * bytes, the tool echoes and `orchard orchestrator roster` can never disagree.
 */

/** Finished-clean children stay listed as idle, this many of the most recently active. */
export const ROSTER_IDLE_LIMIT = 5;

/** A child's state as the ledger records it. */
export type ChildStatus = 'running' | 'idle' | 'failed' | 'cancelled';

/** What the roster needs of a ledger entry. */
export interface RosterChild {
  readonly childId: string;
  readonly title: string;
  readonly agent: string;
  readonly status: ChildStatus;
  /** Ledger clock at the child's last dispatch or turn end (larger = more recent): orders the idle rows. */
  readonly lastActivity: number;
  /** System agents do work for Orchard itself and are never routed to. */
  readonly system?: boolean;
}

/** Running children (all), then the ROSTER_IDLE_LIMIT most recently active idle ones; failed, cancelled, system never. */
export function routableChildren<C extends RosterChild>(children: readonly C[]): C[] {
  const visible = children.filter((c) => !c.system);
  const newestFirst = (a: C, b: C) => b.lastActivity - a.lastActivity || a.childId.localeCompare(b.childId);
  const running = visible.filter((c) => c.status === 'running').sort(newestFirst);
  const idle = visible
    .filter((c) => c.status === 'idle')
    .sort(newestFirst)
    .slice(0, ROSTER_IDLE_LIMIT);
  return [...running, ...idle];
}

/** One cell of a row: a title the model or a user wrote must not break the row (no newlines, no column bars). */
function cell(text: string): string {
  return text.replace(/\s+/g, ' ').replace(/\|/g, '/').trim();
}

export function rosterRow(child: RosterChild): string {
  return `${cell(child.childId)} | ${cell(child.title)} | ${cell(child.agent)} | ${child.status}`;
}

/**
 * The roster as plain prose and rows `id | title | agent | status`: no XML-like envelope, since a model treats a
 * tagged block as data to quote rather than as its own fleet.
 */
export function renderRoster(children: readonly RosterChild[]): string {
  return renderRosterRows(routableChildren(children));
}

/** The roster text of rows already chosen (a dispatch echo adds the child it just dispatched to). */
export function renderRosterRows(rows: readonly RosterChild[]): string {
  if (rows.length === 0) {
    return 'Your child sessions: none yet. Create one with session create when a request needs a worker.';
  }
  return [ROSTER_PREAMBLE, ROSTER_HEADER, ...rows.map(rosterRow)].join('\n');
}

/** The first line of a roster with rows, and the header of its rows. */
export const ROSTER_PREAMBLE =
  'Your child sessions, each owning its topic. Route work to the one that owns it with session send <id> <task>; ' +
  'create a new one only for a topic none of them owns.';
export const ROSTER_HEADER = 'id | title | agent | status';
