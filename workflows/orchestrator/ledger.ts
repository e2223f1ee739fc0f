/**
 * The orchestrator's authority ledger (invariants 5 and 6): its children, as only it records them. Pure and
 * JSON-safe (arrays, never a Map), so it is carried across continue-as-new as it is.
 */
import type { ChildTurnEnded, CompletionGroupView, OrchestratorChildView, RoutingChange } from '../messages';
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

/** Turn ends remembered per child for deduplication (a child's turn ids are unique; redelivery is recent). */
const TURN_ENDS_REMEMBERED = 50;

export interface CarriedLedger {
  readonly children: readonly LedgerChild[];
  /** Logical clock of child activity (orders the roster's idle rows); no wall time in workflow code. */
  readonly clock: number;
  /** [childId, turnId] of turn ends already counted, newest last. */
  readonly seenTurnEnds: readonly (readonly [string, string])[];
  readonly groups: readonly CompletionGroup[];
  readonly proposals: readonly Proposal[];
  /** Children changed since the routing cache was last written. */
  readonly unprojected: readonly string[];
}

export class Ledger {
  children: LedgerChild[];
  seenTurnEnds: [string, string][];
  groups: CompletionGroup[];
  proposals: Proposal[];
  unprojected: string[];
  private clock: number;

  constructor(carried?: CarriedLedger) {
    this.children = [...(carried?.children ?? [])];
    this.clock = carried?.clock ?? 0;
    this.seenTurnEnds = (carried?.seenTurnEnds ?? []).map(([c, t]) => [c, t]);
    this.groups = [...(carried?.groups ?? [])];
    this.proposals = [...(carried?.proposals ?? [])];
    this.unprojected = [...(carried?.unprojected ?? [])];
  }

  get(childId: string): LedgerChild | undefined {
    return this.children.find((c) => c.childId === childId);
  }

  /** The live or idle child that owns a topic (its key, or one of its aliases' keys), if any. */
  ownerOfTopic(topic: string): LedgerChild | undefined {
    const key = topicKey(topic);
    if (!key) return undefined;
    return this.children.find(
      (c) =>
        (c.status === 'running' || c.status === 'idle') &&
        (c.topicKey === key || c.routingAliases.some((alias) => topicKey(alias) === key)),
    );
  }

  /** The next tick of the activity clock: later activity, larger value. */
  private tick(): number {
    return ++this.clock;
  }

  add(child: Omit<LedgerChild, 'turnEnds' | 'lastActivity'>): LedgerChild {
    const entry: LedgerChild = { ...child, lastActivity: this.tick(), turnEnds: 0 };
    this.children.push(entry);
    this.touched(entry.childId);
    return entry;
  }

  private update(childId: string, change: Partial<LedgerChild>): void {
    const at = this.children.findIndex((c) => c.childId === childId);
    if (at < 0) return;
    this.children[at] = { ...this.children[at], ...change };
    this.touched(childId);
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
    this.groups = this.groups
      .map((g) => (g.members.includes(childId) ? { ...g, members: g.members.filter((m) => m !== childId) } : g))
      .filter((g) => g.members.length > 0 || g.delivered);
    this.unprojected = this.unprojected.filter((id) => id !== childId);
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
   * this (childId, turnId) was already counted or the child is not in the ledger.
   */
  turnEnded(notice: ChildTurnEnded): ChildResult[] | undefined {
    const child = this.get(notice.childId);
    if (!child) return undefined;
    if (this.seenTurnEnds.some(([c, t]) => c === notice.childId && t === notice.turnId)) return undefined;
    this.seenTurnEnds.push([notice.childId, notice.turnId]);
    if (this.seenTurnEnds.length > TURN_ENDS_REMEMBERED * Math.max(1, this.children.length)) this.seenTurnEnds.shift();
    const status: ChildStatus =
      notice.outcome === 'failed' ? 'failed' : notice.outcome === 'cancelled' ? 'cancelled' : notice.queued > 0 ? 'running' : 'idle';
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

  closed(childId: string, status: 'failed' | 'cancelled'): void {
    this.update(childId, { status, lastActivity: this.tick() });
  }

  carry(): CarriedLedger {
    return {
      children: this.children,
      clock: this.clock,
      seenTurnEnds: this.seenTurnEnds,
      groups: this.groups,
      proposals: this.proposals,
      unprojected: this.unprojected,
    };
  }
}
