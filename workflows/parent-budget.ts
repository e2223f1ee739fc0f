import { setHandler } from '@temporalio/workflow';
import { orchardFailure } from '../contract/failures';
import { fundChildProblem, fundChildUpdate, setBudgetProblem, setBudgetUpdate } from '../contract/messages';
import type { Budget } from './budget';

/**
 * The budget updates of a parent (orchestrator or team): `fundChild`, a child's raise carved from what remains, and
 * `setBudget`, a user's raise of the parent's own limit. Both are decided in their synchronous validators and applied
 * in the same workflow task, so two raises can never both take the same tokens; a repeated request id changes nothing.
 */
export function registerParentBudget(budget: Budget, what: string, changed: (kind: 'fund' | 'limit') => void): void {
  setHandler(
    fundChildUpdate,
    (input) => {
      if (!budget.seen(input.requestId)) {
        budget.fund(input.childId, input.limit);
        budget.remember(input.requestId);
        changed('fund');
      }
      return budget.view(true);
    },
    {
      description: `A child's budget raise, carved from the ${what}'s (sent by the child's setBudget).`,
      validator: (input) => {
        const problem = fundChildProblem(input) ?? (budget.seen(input.requestId) ? undefined : budget.fundProblem(input.childId, input.limit));
        if (problem) throw orchardFailure(problem.code, problem.message);
      },
    },
  );
  setHandler(
    setBudgetUpdate,
    (input) => {
      if (!budget.seen(input.requestId)) {
        budget.setLimit(input.limit);
        budget.remember(input.requestId);
        changed('limit');
      }
      return budget.view(true);
    },
    {
      description: `Raises or sets the ${what}'s token budget (its children's budgets are carved from it); work that waited for budget goes on.`,
      validator: (input) => {
        const problem = setBudgetProblem(input) ?? (budget.seen(input.requestId) ? undefined : budget.setProblem(input.limit));
        if (problem) throw orchardFailure(problem.code, problem.message);
      },
    },
  );
}
