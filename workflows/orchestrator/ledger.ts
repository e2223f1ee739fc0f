/**
 * The orchestrator's authority ledger (invariants 5 and 6): its children, as only it records them. Pure; what
 * `carry()` returns is JSON-safe (arrays, never a Map) and is the ledger's part of the continue-as-new input, so it
 * is bounded by the children, never by the turn ends: each child carries only its last TURN_WINDOW turn ids, and a
 * closed child leaves as a small tombstone (issue 18, deliverable 4).
 */
import type { ChildTurnEnded, CompletionGroupView, OrchestratorChildView, RoutingChange } from '../../contract/messages';
import type { ChildStatus } from './roster';
import { topicKey } from './topic';

export type LedgerChild = OrchestratorChildView & { readonly system?: boolean };

/** A completion group: its members' results are held until the group is sealed and every member is terminal. */
export interface CompletionGroup extends CompletionGroupView {
  /** The held turn ends of members, delivered together. */
  readonly results: readonly ChildTurnEnded[];
}

/** A proposed routing change waiting for the user to confirm its token. */
export interface Proposal {
  readonly token: string;
  readonly childId: string;
  readonly change: RoutingChange;
  /** The message sequence number at proposal time: only a user message numbered at or after it can confirm. */
  readonly afterSeq: number;
  /** The user message that carried the token, once one has. */
  readonly confirmedBy?: string;
}

/** A turn end as the orchestrator's model gets it: one child's, or a whole group's. */
export type ChildResult =
  | { readonly kind: 'each'; readonly notice: ChildTurnEnded }
  | { readonly kind: 'group'; readonly groupId: string; readonly notices: readonly ChildTurnEnded[] };

/** Proposals kept waiting; the oldest is dropped first (its token stops working). */
const PROPOSALS_KEPT = 20;
/** Delivered groups kept for the status view. */
const DELIVERED_GROUPS_KEPT = 20;

/**
 * Turn ids remembered per child for deduplication: a child's turn ids are unique, and a redelivered turn end is a
 * recent one (a child notifies once per turn, in order), so a redelivery of a turn older than this many of the
 * same child's later turns would count again.
 */
export const TURN_WINDOW = 8;

/**
 * Closed children kept as tombstones, the most recently active ones. A send to an id closed longer ago than that is
 * answered `session_not_found` (still never a create: invariant 5); its full row stays in the routing cache.
 */
export const TOMBSTONES_KEPT = 1_000;
export const TOMBSTONE_TITLE_CHARS = 80;
const TOMBSTONE_AGENT_CHARS = 32;

/** A child as carried: its row, its last turn ids (oldest first), and whether its session's close notice was counted. */
type CarriedChild = LedgerChild & { readonly recentTurns?: readonly string[]; readonly closeNoticeCounted?: true };

/**
 * What is carried of a closed child (see `carry`): enough for `get` to answer with a closed view (a send to it is
 * refused as closed, by the relay for a cancelled one and by its closed workflow for a failed one, never
 * `session_not_found`, never a create) and for the status view. Its full row is in the routing cache.
 */
interface Tombstone {
  readonly childId: string;
  readonly status: 'failed' | 'cancelled';
  /** Cut to TOMBSTONE_TITLE_CHARS. */
  readonly title: string;
  readonly agent: string;
  readonly topicKey?: string;
  readonly lastActivity: number;
  readonly turnEnds: number;
  /** Its session's close notice was counted: another one is a redelivery. */
  readonly closeNoticeCounted?: true;
  readonly system?: true;
}

export interface CarriedLedger {
  readonly children: readonly CarriedChild[];
  /** Closed children, least recently active first (absent in ledgers carried before tombstones). */
  readonly tombstones?: readonly Tombstone[];
  /** Logical clock of child activity (orders the roster's idle rows); no wall time in workflow code. */
  readonly clock: number;
  /**
   * Ledgers carried before per-child windows: [childId, turnId] of turn ends counted, newest last. Read into the
   * children's windows (so a recent redelivery still counts once), never written.
   */
  readonly seenTurnEnds?: readonly (readonly [string, string])[];
  readonly groups: readonly CompletionGroup[];
  readonly proposals: readonly Proposal[];
  /** Children changed since the routing cache was last written. */
  readonly unprojected: readonly string[];
}

export class Ledger {
  /** Every child the ledger answers for: full rows, and the closed views of tombstones. */
  children: LedgerChild[];
  groups: CompletionGroup[];
  proposals: Proposal[];
  unprojected: string[];
  private clock: number;
  /** Each child's last TURN_WINDOW turn ids, oldest first. */
  private readonly recentTurns = new Map<string, string[]>();
  /** Children whose session's close notice was counted (a failed *turn* leaves a session open; a close does not). */
  private readonly closeNoticed = new Set<string>();
  /** Children held only as tombstones (their `children` entry is the closed view). */
  private readonly tombstoned = new Set<string>();
  /** Where each child is in `children` (every turn end looks its child up). */
  private at = new Map<string, number>();

  constructor(carried?: CarriedLedger) {
    const tombstones = carried?.tombstones ?? [];
    const rows = (carried?.children ?? []).map(({ recentTurns, closeNoticeCounted, ...row }) => {
      if (recentTurns?.length) this.recentTurns.set(row.childId, [...recentTurns]);
      if (closeNoticeCounted) this.closeNoticed.add(row.childId);
      return row;
    });
    for (const t of tombstones) {
      this.tombstoned.add(t.childId);
      if (t.closeNoticeCounted) this.closeNoticed.add(t.childId);
    }
    this.children = [...tombstones.map(closedView), ...rows];
    this.reindex();
    this.clock = carried?.clock ?? 0;
    // A ledger carried with one global window: each child keeps its own last turn ids of it. A close notice among
    // them (its turn id is `closed/<execution>`: workflows/session/workflow.ts) says the session closed.
    const open = new Set(rows.map((c) => c.childId));
    for (const [childId, turnId] of carried?.seenTurnEnds ?? []) {
      if (!open.has(childId)) continue;
      this.remember(childId, turnId);
      if (turnId.startsWith('closed/')) this.closeNoticed.add(childId);
    }
    this.groups = [...(carried?.groups ?? [])];
    this.proposals = [...(carried?.proposals ?? [])];
    this.unprojected = [...(carried?.unprojected ?? [])];
  }

  get(childId: string): LedgerChild | undefined {
    const at = this.at.get(childId);
    return at === undefined ? undefined : this.children[at];
  }

  private reindex(): void {
    this.at = new Map();
    for (const [i, c] of this.children.entries()) if (!this.at.has(c.childId)) this.at.set(c.childId, i);
  }

  /** The live or idle child that owns a topic (its key, or one of its aliases' keys), if any. */
  ownerOfTopic(topic: string): LedgerChild | undefined {
    const key = topicKey(topic);
    if (!key) return undefined;
    return this.children.find(
      (c) => (c.status === 'running' || c.status === 'idle') && (c.topicKey === key || c.routingAliases.some((alias) => topicKey(alias) === key)),
    );
  }

  /** The next tick of the activity clock: later activity, larger value. */
  private tick(): number {
    return ++this.clock;
  }

  add(child: Omit<LedgerChild, 'turnEnds' | 'lastActivity'>): LedgerChild {
    const entry: LedgerChild = { ...child, lastActivity: this.tick(), turnEnds: 0 };
    const at = this.children.push(entry) - 1;
    if (!this.at.has(entry.childId)) this.at.set(entry.childId, at);
    this.touched(entry.childId);
    return entry;
  }

  private update(childId: string, change: Partial<LedgerChild>): void {
    const at = this.at.get(childId);
    if (at === undefined) return;
    const next = { ...this.children[at], ...change };
    this.children[at] = next;
    if (this.tombstoned.has(childId)) {
      // The routing cache keeps the full row projected before the child was tombstoned: a tombstone is never
      // projected over it. One that takes work again (a closed session does not) is a row again, with what it kept.
      if (next.status !== 'running' && next.status !== 'idle') return;
      this.tombstoned.delete(childId);
      this.closeNoticed.delete(childId);
    }
    this.touched(childId);
  }

  private remember(childId: string, turnId: string): void {
    const recent = this.recentTurns.get(childId) ?? [];
    recent.push(turnId);
    if (recent.length > TURN_WINDOW) recent.shift();
    this.recentTurns.set(childId, recent);
  }

  private touched(childId: string): void {
    if (!this.unprojected.includes(childId)) this.unprojected.push(childId);
  }

  /** The children the routing cache has not seen yet, and forgets them (the caller writes them). */
  takeUnprojected(): LedgerChild[] {
    const ids = this.unprojected;
    this.unprojected = [];
    return ids.map((id) => this.get(id)).filter((c): c is LedgerChild => c !== undefined);
  }

  // Completion groups (invariant 7) -------------------------------------------------------------------------

  /** Why a child cannot join this group now (a sealed or delivered group takes no late member), if it cannot. */
  groupRefusal(groupId: string): string | undefined {
    const group = this.groups.find((g) => g.groupId === groupId);
    if (group?.sealed) {
      return `completion group ${groupId} was sealed when turn ${group.openedTurn} settled; late members are rejected`;
    }
    return undefined;
  }

  /** Takes back a child whose creation failed (registered before its workflow was started, so no turn end is missed). */
  remove(childId: string): void {
    this.children = this.children.filter((c) => c.childId !== childId);
    this.reindex();
    this.groups = this.groups
      .map((g) => (g.members.includes(childId) ? { ...g, members: g.members.filter((m) => m !== childId) } : g))
      .filter((g) => g.members.length > 0 || g.delivered);
    this.unprojected = this.unprojected.filter((id) => id !== childId);
    this.recentTurns.delete(childId);
    this.closeNoticed.delete(childId);
    this.tombstoned.delete(childId);
  }

  /** Registers a member in the turn that spawns it (opening the group on its first member). */
  joinGroup(groupId: string, childId: string, turn: number): void {
    const at = this.groups.findIndex((g) => g.groupId === groupId);
    if (at < 0) {
      this.groups.push({ groupId, openedTurn: turn, members: [childId], terminal: [], sealed: false, delivered: false, results: [] });
    } else {
      this.groups[at] = { ...this.groups[at], members: [...this.groups[at].members, childId] };
    }
  }

  /** Seals every open group at the settlement of the turn that opened it; returns those now complete. */
  sealGroups(): ChildResult[] {
    this.groups = this.groups.map((g) => (g.sealed ? g : { ...g, sealed: true }));
    return this.completeGroups();
  }

  private completeGroups(): ChildResult[] {
    const ready: ChildResult[] = [];
    this.groups = this.groups.map((g) => {
      if (!g.sealed || g.delivered || g.members.some((m) => !g.terminal.includes(m))) return g;
      ready.push({ kind: 'group', groupId: g.groupId, notices: g.results });
      return { ...g, delivered: true, results: [] };
    });
    const delivered = this.groups.filter((g) => g.delivered);
    if (delivered.length > DELIVERED_GROUPS_KEPT) {
      const drop = new Set(delivered.slice(0, delivered.length - DELIVERED_GROUPS_KEPT));
      this.groups = this.groups.filter((g) => !drop.has(g));
    }
    return ready;
  }

  // Routing-metadata proposals (invariant 6) ----------------------------------------------------------------

  propose(proposal: Omit<Proposal, 'confirmedBy'>): void {
    this.proposals.push(proposal);
    if (this.proposals.length > PROPOSALS_KEPT) this.proposals.shift();
  }

  /** A user message (number `seq`) carries these words: any waiting token among them is confirmed by it. */
  userSaid(text: string, seq: number, messageId: string): void {
    this.proposals = this.proposals.map((p) => (!p.confirmedBy && seq >= p.afterSeq && text.includes(p.token) ? { ...p, confirmedBy: messageId } : p));
  }

  /** Applies a confirmed proposal (once: its token is spent). */
  applyProposal(token: string): void {
    const proposal = this.proposals.find((p) => p.token === token);
    if (!proposal) return;
    this.proposals = this.proposals.filter((p) => p !== proposal);
    this.update(proposal.childId, {
      ...(proposal.change.routingDescription !== undefined ? { routingDescription: proposal.change.routingDescription } : {}),
      ...(proposal.change.routingAliases !== undefined ? { routingAliases: [...proposal.change.routingAliases] } : {}),
    });
  }

  /** Work was relayed to the child: it is running again. */
  dispatched(childId: string): void {
    this.update(childId, { status: 'running', lastActivity: this.tick() });
  }

  /**
   * Counts a child's turn end once. Returns the results now ready for the model: the notice itself for an
   * `each` child, a whole group's once its last member is terminal, nothing while a group waits; undefined when
   * this (childId, turnId) was already counted (among the child's last TURN_WINDOW) or the child is not in the ledger.
   */
  turnEnded(notice: ChildTurnEnded): ChildResult[] | undefined {
    const child = this.get(notice.childId);
    if (!child) return undefined;
    // A tombstone's session is closed and runs no turn: a turn end for it is a late redelivery, and so is a second
    // close notice. A first close notice (a cancelled child whose close had not arrived yet) still counts.
    if (this.tombstoned.has(child.childId) && (!notice.closed || this.closeNoticed.has(child.childId))) return undefined;
    if (this.recentTurns.get(child.childId)?.includes(notice.turnId)) return undefined;
    this.remember(child.childId, notice.turnId);
    if (notice.closed) this.closeNoticed.add(child.childId);
    const status: ChildStatus = notice.outcome === 'failed' ? 'failed' : notice.outcome === 'cancelled' ? 'cancelled' : notice.queued > 0 ? 'running' : 'idle';
    this.update(notice.childId, { status, lastActivity: this.tick(), turnEnds: child.turnEnds + (notice.closed ? 0 : 1) });
    const at = this.groups.findIndex((g) => !g.delivered && g.members.includes(notice.childId));
    if (at < 0) return [{ kind: 'each', notice }];
    const group = this.groups[at];
    this.groups[at] = {
      ...group,
      results: [...group.results, notice],
      terminal: status !== 'running' && !group.terminal.includes(notice.childId) ? [...group.terminal, notice.childId] : group.terminal,
    };
    return this.completeGroups();
  }

  /** A send to the child was answered `session_closed` or `session_not_found`. */
  closed(childId: string, status: 'failed' | 'cancelled'): void {
    this.update(childId, { status, lastActivity: this.tick() });
  }

  /**
   * The ledger as the next run starts from it. Open children carry their full rows and their turn windows; a closed
   * child (cancelled, or failed with its close notice counted: a failed *turn* leaves the session open, and a send
   * resumes it) that no undelivered group or pending proposal waits on and that the routing cache has (not in
   * `unprojected`) is carried as a tombstone; the TOMBSTONES_KEPT most recently active tombstones are kept.
   */
  carry(): CarriedLedger {
    const waitedOn = new Set([
      ...this.unprojected,
      ...this.proposals.map((p) => p.childId),
      ...this.groups.filter((g) => !g.delivered).flatMap((g) => g.members),
    ]);
    const isClosed = (c: LedgerChild) => c.status === 'cancelled' || (c.status === 'failed' && this.closeNoticed.has(c.childId));
    const children: CarriedChild[] = [];
    const tombstones: Tombstone[] = [];
    for (const c of this.children) {
      if (this.tombstoned.has(c.childId) || (!waitedOn.has(c.childId) && isClosed(c))) {
        tombstones.push(tombstoneOf(c, this.closeNoticed.has(c.childId)));
        continue;
      }
      const recentTurns = this.recentTurns.get(c.childId);
      children.push({
        ...c,
        ...(recentTurns?.length ? { recentTurns: [...recentTurns] } : {}),
        ...(this.closeNoticed.has(c.childId) ? { closeNoticeCounted: true as const } : {}),
      });
    }
    tombstones.sort((a, b) => a.lastActivity - b.lastActivity || (a.childId < b.childId ? -1 : a.childId > b.childId ? 1 : 0));
    return {
      children,
      tombstones: tombstones.slice(-TOMBSTONES_KEPT),
      clock: this.clock,
      groups: this.groups,
      proposals: this.proposals,
      unprojected: this.unprojected,
    };
  }
}

/** At most `max` characters (never half a surrogate pair), with an ellipsis when cut. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const kept = text.slice(0, max - 1);
  return `${/[\uD800-\uDBFF]$/.test(kept) ? kept.slice(0, -1) : kept}…`;
}

function tombstoneOf(c: LedgerChild, closeNoticeCounted: boolean): Tombstone {
  return {
    childId: c.childId,
    status: c.status === 'failed' ? 'failed' : 'cancelled',
    title: cut(c.title, TOMBSTONE_TITLE_CHARS),
    agent: cut(c.agent, TOMBSTONE_AGENT_CHARS),
    ...(c.topicKey !== undefined ? { topicKey: c.topicKey } : {}),
    lastActivity: c.lastActivity,
    turnEnds: c.turnEnds,
    ...(closeNoticeCounted ? { closeNoticeCounted: true as const } : {}),
    ...(c.system ? { system: true as const } : {}),
  };
}

/** The row a tombstone answers with: closed, never routable (no aliases), its routing description dropped. */
function closedView(t: Tombstone): LedgerChild {
  return {
    childId: t.childId,
    title: t.title,
    agent: t.agent,
    ...(t.topicKey !== undefined ? { topicKey: t.topicKey } : {}),
    routingAliases: [],
    status: t.status,
    // Not kept: the routing cache has the row as it was (provenance, description, aliases).
    provenance: { turn: 0, callId: '' },
    lastActivity: t.lastActivity,
    turnEnds: t.turnEnds,
    ...(t.system ? { system: true } : {}),
  };
}
