/**
 * The orchestrator's authority ledger (invariants 5 and 6): its children, as only it records them. Pure and
 * JSON-safe (arrays, never a Map), so it is carried across continue-as-new as it is.
 */
import type { ChildTurnEnded, OrchestratorChildView } from '../messages';
import type { ChildStatus } from './roster';
import { topicKey } from './topic';

export type LedgerChild = OrchestratorChildView & { readonly system?: boolean };

/** Turn ends remembered per child for deduplication (a child's turn ids are unique; redelivery is recent). */
const TURN_ENDS_REMEMBERED = 50;

export interface CarriedLedger {
  readonly children: readonly LedgerChild[];
  /** Logical clock of child activity (orders the roster's idle rows); no wall time in workflow code. */
  readonly clock: number;
  /** [childId, turnId] of turn ends already counted, newest last. */
  readonly seenTurnEnds: readonly (readonly [string, string])[];
}

export class Ledger {
  children: LedgerChild[];
  seenTurnEnds: [string, string][];
  private clock: number;

  constructor(carried?: CarriedLedger) {
    this.children = [...(carried?.children ?? [])];
    this.clock = carried?.clock ?? 0;
    this.seenTurnEnds = (carried?.seenTurnEnds ?? []).map(([c, t]) => [c, t]);
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
    return entry;
  }

  private update(childId: string, change: Partial<LedgerChild>): void {
    const at = this.children.findIndex((c) => c.childId === childId);
    if (at >= 0) this.children[at] = { ...this.children[at], ...change };
  }

  /** Work was relayed to the child: it is running again. */
  dispatched(childId: string): void {
    this.update(childId, { status: 'running', lastActivity: this.tick() });
  }

  /** Counts a child's turn end once; false when this (childId, turnId) was already counted. */
  turnEnded(notice: ChildTurnEnded): boolean {
    if (this.seenTurnEnds.some(([c, t]) => c === notice.childId && t === notice.turnId)) return false;
    this.seenTurnEnds.push([notice.childId, notice.turnId]);
    if (this.seenTurnEnds.length > TURN_ENDS_REMEMBERED * Math.max(1, this.children.length)) this.seenTurnEnds.shift();
    const child = this.get(notice.childId);
    if (!child) return false;
    const status: ChildStatus =
      notice.outcome === 'failed' ? 'failed' : notice.outcome === 'cancelled' ? 'cancelled' : notice.queued > 0 ? 'running' : 'idle';
    this.update(notice.childId, { status, lastActivity: this.tick(), turnEnds: child.turnEnds + 1 });
    return true;
  }

  closed(childId: string, status: 'failed' | 'cancelled'): void {
    this.update(childId, { status, lastActivity: this.tick() });
  }

  carry(): CarriedLedger {
    return { children: this.children, clock: this.clock, seenTurnEnds: this.seenTurnEnds };
  }
}
