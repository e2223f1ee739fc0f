import type { BudgetView } from '../contract/messages';

/** `budget: 1,200 spent of 50,000, 8,000 escrowed, 40,800 remaining` (or `tokens: 1,200 spent (no budget)`). */
export function budgetLine(budget: BudgetView | undefined): string | undefined {
  if (!budget) return undefined;
  const n = (v: number) => v.toLocaleString('en-US');
  if (budget.limit === undefined) return `  tokens: ${n(budget.spent)} spent (no budget)`;
  const parts = [`${n(budget.spent)} spent of ${n(budget.limit)}`];
  if (budget.escrowed !== undefined) parts.push(`${n(budget.escrowed)} escrowed`);
  parts.push(`${n(budget.remaining ?? 0)} remaining`);
  const notes = [...(budget.exhausted ? ['exhausted: raise it to go on'] : []), ...(budget.fundedBy ? [`carved from ${budget.fundedBy}`] : [])];
  return `  budget: ${parts.join(', ')}${notes.length > 0 ? ` (${notes.join('; ')})` : ''}`;
}
