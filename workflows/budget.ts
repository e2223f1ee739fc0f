/**
 * A token budget: the limit, what was spent, and (a parent's) the children's budgets carved out of it (escrow).
 * Plain data so it survives continue-as-new as JSON; the session, orchestrator and team workflows each keep one.
 *
 * A parent's remaining = limit − own spend − what its children spent − what its open children may still spend. A
 * child's whole limit is held from the moment it is carved until the child reports it closed, so the fleet can never
 * spend more than the parent's limit; a closed child's unspent tokens come back.
 */
import type { ErrorCode } from '../contract/errors';
import type { BudgetView, ChildTurnEnded } from '../contract/messages';

/** A child created without an explicit budget gets this share of what its parent has left (a quarter). */
export const DEFAULT_CHILD_SHARE = 4;
/** Request ids of `setBudget`/`fundChild` remembered across continue-as-new (their answers are the current view). */
const REQUESTS_KEPT = 100;

/** An open child's budget (a closed child's spend is folded into `closedSpent`, so the list stays small). */
interface ChildBudget {
  readonly childId: string;
  limit: number;
  spent: number;
}

export interface CarriedBudget {
  readonly limit?: number;
  readonly spent: number;
  readonly exhausted?: boolean;
  readonly fundedBy?: string;
  readonly children?: readonly ChildBudget[];
  readonly closedSpent?: number;
  readonly requests?: readonly string[];
}

export type BudgetRefusal = { code: ErrorCode; message: string };

export class Budget {
  limit?: number;
  /** This workflow's own model calls. */
  spent: number;
  exhausted: boolean;
  readonly fundedBy?: string;
  private readonly children: ChildBudget[];
  /** What closed children spent. */
  private closedSpent: number;
  private readonly requests: string[];

  constructor(carried: CarriedBudget) {
    this.limit = carried.limit;
    this.spent = carried.spent;
    this.exhausted = carried.exhausted ?? false;
    this.fundedBy = carried.fundedBy;
    this.children = (carried.children ?? []).map((c) => ({ ...c }));
    this.closedSpent = carried.closedSpent ?? 0;
    this.requests = [...(carried.requests ?? [])];
  }

  /** Everything spent: own calls and children's. */
  get totalSpent(): number {
    return this.spent + this.closedSpent + this.children.reduce((n, c) => n + c.spent, 0);
  }

  /** What open children may still spend of what was carved for them. */
  get escrowed(): number {
    return this.children.reduce((n, c) => n + Math.max(0, c.limit - c.spent), 0);
  }

  /** Tokens the next model call or child budget may take; undefined without a limit. */
  get remaining(): number | undefined {
    return this.limit === undefined ? undefined : Math.max(0, this.limit - this.totalSpent - this.escrowed);
  }

  /** What a model call carries: what remains and its output cap, from which its reservation is made (none without a limit). */
  forCall(maxOutputTokens: number): { budget?: { remaining: number; maxOutputTokens: number } } {
    const remaining = this.remaining;
    return remaining === undefined ? {} : { budget: { remaining, maxOutputTokens } };
  }

  /**
   * Charges a model call's answer (the reported tokens, or its reservation when the model reported none). A call that
   * was not sent marks the budget exhausted and answers why: the turn ends `budget_exhausted`.
   */
  settle(
    answer: { usage?: { charged: number }; refused?: { reserved: number; remaining: number } },
    raiseWith: string,
  ): { code: 'budget_exhausted'; message: string } | undefined {
    if (answer.usage) this.spent += answer.usage.charged;
    if (!answer.refused) return undefined;
    this.exhausted = true;
    const { reserved, remaining } = answer.refused;
    return {
      code: 'budget_exhausted',
      message: `model call not sent: it reserves up to ${reserved} tokens and ${remaining} of the budget's ${this.limit} remain (spent ${this.totalSpent}, escrowed ${this.escrowed}); raise it with ${raiseWith}`,
    };
  }

  /**
   * Carves a new child's budget: `requested` tokens, or DEFAULT_CHILD_SHARE-th of what remains. Answers the child's
   * limit (undefined when this budget has none), or why it cannot be funded.
   */
  carve(childId: string, requested?: number): { limit?: number; funded: boolean } | BudgetRefusal {
    const remaining = this.remaining;
    // Without a limit nothing is carved: a budget asked for is the child's own.
    if (remaining === undefined) return { limit: requested, funded: false };
    const limit = requested ?? Math.floor(remaining / DEFAULT_CHILD_SHARE);
    if (limit < 1 || limit > remaining) {
      return {
        code: 'budget_insufficient',
        message: `${requested === undefined ? 'a default share' : `${requested} tokens`} cannot be carved: ${remaining} of ${this.limit} remain (spent ${this.totalSpent}, escrowed ${this.escrowed})`,
      };
    }
    this.children.push({ childId, limit, spent: 0 });
    return { limit, funded: true };
  }

  /** Whether an open child's budget was carved from this one. */
  holds(childId: string): boolean {
    return this.children.some((c) => c.childId === childId);
  }

  /** A child that was never created gives its escrow back whole. */
  uncarve(childId: string): void {
    const at = this.children.findIndex((c) => c.childId === childId && c.spent === 0);
    if (at >= 0) this.children.splice(at, 1);
  }

  /** A child's turn end or close: its spend is counted; once closed, its unspent escrow comes back. */
  childReported(notice: Pick<ChildTurnEnded, 'childId' | 'closed' | 'budget'>): void {
    const at = this.children.findIndex((c) => c.childId === notice.childId);
    if (at < 0) return;
    const child = this.children[at];
    if (notice.budget) child.spent = Math.max(child.spent, notice.budget.spent);
    if (notice.closed) {
      this.children.splice(at, 1);
      this.closedSpent += child.spent;
    }
  }

  /** Why a child's limit cannot be raised to `limit` out of this budget, if it cannot (a validator: writes nothing). */
  fundProblem(childId: string, limit: number): BudgetRefusal | undefined {
    const child = this.children.find((c) => c.childId === childId);
    if (!child) return { code: 'session_not_found', message: `${childId} is not an open child funded by this budget` };
    if (limit < child.limit) return { code: 'invalid_input', message: `${childId}'s budget is ${child.limit}: a carved budget only grows` };
    const remaining = this.remaining ?? 0;
    if (limit - child.limit > remaining) {
      return {
        code: 'budget_insufficient',
        message: `raising ${childId} from ${child.limit} to ${limit} needs ${limit - child.limit} tokens; ${remaining} remain (limit ${this.limit}, spent ${this.totalSpent}, escrowed ${this.escrowed}): raise this budget first`,
      };
    }
    return undefined;
  }

  fund(childId: string, limit: number): void {
    const child = this.children.find((c) => c.childId === childId);
    if (child) child.limit = Math.max(child.limit, limit);
  }

  /** Why this budget's own limit cannot be set to `limit`, if it cannot (a validator: writes nothing). */
  setProblem(limit: number): BudgetRefusal | undefined {
    const committed = this.totalSpent + this.escrowed;
    if (limit < committed) return { code: 'invalid_input', message: `${committed} tokens are already spent or escrowed: the limit cannot be below that` };
    if (this.fundedBy !== undefined && this.limit !== undefined && limit < this.limit) {
      return { code: 'invalid_input', message: `this budget was carved from ${this.fundedBy}: it only grows (it is ${this.limit})` };
    }
    return undefined;
  }

  setLimit(limit: number): void {
    this.limit = limit;
    this.exhausted = false;
  }

  seen(requestId: string): boolean {
    return this.requests.includes(requestId);
  }

  remember(requestId: string): void {
    this.requests.push(requestId);
    if (this.requests.length > REQUESTS_KEPT) this.requests.shift();
  }

  /** The child's own budget as it reports it to its parent. */
  report(): { limit?: number; spent: number } {
    return { ...(this.limit !== undefined ? { limit: this.limit } : {}), spent: this.spent };
  }

  /** `asParent`: an orchestrator's or team's, which shows its escrow even before it has carved any. */
  view(asParent = false): BudgetView {
    const parent = asParent || this.children.length > 0 || this.closedSpent > 0;
    return {
      ...(this.limit !== undefined ? { limit: this.limit } : {}),
      spent: this.totalSpent,
      ...(parent ? { escrowed: this.escrowed } : {}),
      ...(this.limit !== undefined ? { remaining: this.remaining } : {}),
      ...(this.exhausted ? { exhausted: true } : {}),
      ...(this.fundedBy ? { fundedBy: this.fundedBy } : {}),
    };
  }

  carry(): CarriedBudget {
    return {
      ...(this.limit !== undefined ? { limit: this.limit } : {}),
      spent: this.spent,
      ...(this.exhausted ? { exhausted: true } : {}),
      ...(this.fundedBy ? { fundedBy: this.fundedBy } : {}),
      ...(this.children.length > 0 ? { children: this.children.map((c) => ({ ...c })) } : {}),
      ...(this.closedSpent > 0 ? { closedSpent: this.closedSpent } : {}),
      ...(this.requests.length > 0 ? { requests: [...this.requests] } : {}),
    };
  }
}
