/**
 * The `budget` demo (`orchard demo budget`): a session created with a token budget writes NOTES.md in its first
 * turn; the user then lowers the cap to what it spent plus 1000 tokens, so the next task's first model call — which
 * reserves the whole conversation plus its output cap — is not sent: that turn ends `budget_exhausted`, the session
 * stays open, and a task sent meanwhile waits. `session budget` raises the cap and the waiting task commits
 * NOTES.md. The check reads facts: the status query, and the model calls Postgres recorded for the session.
 */
import type { Pool } from 'pg';
import type { BudgetView, SessionStatusView } from '../contract/messages';
import type { OrchardClient } from '../client/client';

export interface BudgetDemoOptions {
  readonly sessionId: string;
  readonly repo: string;
  /** Absolute path of the scenario (scenarios/budget.json), readable by the worker. */
  readonly scenario: string;
  readonly log?: (line: string) => void;
}

export interface BudgetDemoResult {
  readonly sessionId: string;
  /** The budget after each stage: the first turn, the refused one, the raise, the end. */
  readonly stages: readonly { readonly stage: string; readonly outcome?: string; readonly budget?: BudgetView }[];
  /** Model calls recorded per turn (the refused turn has none: its call was never sent). */
  readonly callsPerTurn: readonly { readonly turn: number; readonly calls: number; readonly charged: number }[];
  readonly problems: readonly string[];
}

const FIRST = 'Write NOTES.md about this session and check it.';
const REFUSED = 'Now commit NOTES.md.';
const WAITING = 'Please commit NOTES.md now that there is budget.';

export async function runBudgetDemo(client: OrchardClient, pool: Pool, options: BudgetDemoOptions): Promise<BudgetDemoResult> {
  const log = options.log ?? (() => undefined);
  const { sessionId } = options;
  const problems: string[] = [];
  const stages: { stage: string; outcome?: string; budget?: BudgetView }[] = [];
  const turnEnded = (turns: number) => waitForStatus(client, sessionId, (v) => v.turnsCompleted >= turns);

  await client.createSession({
    sessionId,
    title: 'Demo: a session under a token budget',
    repo: options.repo,
    model: { provider: 'scripted', scenario: options.scenario },
    task: FIRST,
    budgetTokens: 1_000_000,
    limits: { maxOutputTokens: 512 },
  });
  log(`created session ${sessionId} with a budget of 1,000,000 tokens (max 512 output tokens a call)`);
  const first = await turnEnded(1);
  stages.push({ stage: 'first turn', outcome: first.lastTurn?.outcome, budget: first.budget });
  if (first.lastTurn?.outcome !== 'finished') problems.push(`the first turn ended ${first.lastTurn?.outcome}, not finished`);

  const tight = (first.budget?.spent ?? 0) + 1000;
  await client.setBudget(sessionId, tight, `${sessionId}/tighten`);
  log(`the user lowers the cap to ${tight} tokens (spent + 1000): less than any next call reserves`);
  await client.send(sessionId, { task: REFUSED, requestId: `${sessionId}/refused` });
  const refused = await turnEnded(2);
  stages.push({ stage: 'refused turn', outcome: refused.lastTurn?.outcome, budget: refused.budget });
  if (refused.lastTurn?.outcome !== 'budget_exhausted') problems.push(`the second turn ended ${refused.lastTurn?.outcome}, not budget_exhausted`);
  if (refused.status !== 'failed_open') problems.push(`the session is ${refused.status} after the refusal, not failed_open (open)`);

  await client.send(sessionId, { task: WAITING, requestId: `${sessionId}/waiting` });
  await new Promise((r) => setTimeout(r, 1000));
  const waiting = await client.status(sessionId);
  stages.push({ stage: 'task sent while exhausted', budget: waiting.budget });
  if (waiting.queued !== 1 || waiting.turnsCompleted !== 2) problems.push(`a task sent while the budget is exhausted ran (queued ${waiting.queued})`);
  log(`a task sent meanwhile waits: ${waiting.queued} queued, ${waiting.turnsCompleted} turns done`);

  const raised = await client.setBudget(sessionId, tight + 200_000, `${sessionId}/raise`);
  log(`orchard session budget ${sessionId} ${tight + 200_000}: the waiting task runs`);
  stages.push({ stage: 'raised', budget: raised });
  const done = await turnEnded(3);
  stages.push({ stage: 'after the raise', outcome: done.lastTurn?.outcome, budget: done.budget });
  if (done.lastTurn?.outcome !== 'finished') problems.push(`the turn after the raise ended ${done.lastTurn?.outcome}, not finished`);

  const { rows } = await pool.query<{ turn: number; calls: number; charged: number }>(
    `SELECT turn, count(*)::int AS calls, sum(charged_tokens)::int AS charged FROM model_calls WHERE session_id = $1 GROUP BY turn ORDER BY turn`,
    [sessionId],
  );
  const callsPerTurn = [1, 2, 3].map((turn) => rows.find((r) => r.turn === turn) ?? { turn, calls: 0, charged: 0 });
  if (callsPerTurn[1].calls !== 0) problems.push(`the refused turn made ${callsPerTurn[1].calls} model call(s)`);
  const charged = callsPerTurn.reduce((n, r) => n + r.charged, 0);
  if (done.budget?.spent !== charged) problems.push(`the budget says ${done.budget?.spent} spent, the recorded calls ${charged}`);
  return { sessionId, stages, callsPerTurn, problems };
}

export function formatBudgetDemo(result: BudgetDemoResult): string {
  const line = (b: BudgetView | undefined) =>
    b ? `${b.spent} spent of ${b.limit ?? '-'}, ${b.remaining ?? '-'} remaining${b.exhausted ? ', exhausted' : ''}` : '-';
  return [
    `session ${result.sessionId}:`,
    ...result.stages.map((s) => `  ${s.stage}${s.outcome ? ` (${s.outcome})` : ''}: ${line(s.budget)}`),
    `  model calls by turn: ${result.callsPerTurn.map((r) => `turn ${r.turn}: ${r.calls} call(s), ${r.charged} tokens`).join('; ')}`,
    result.problems.length === 0 ? 'budget demo: OK' : `budget demo: FAILED\n${result.problems.map((p) => `  - ${p}`).join('\n')}`,
  ].join('\n');
}

async function waitForStatus(client: OrchardClient, sessionId: string, done: (v: SessionStatusView) => boolean): Promise<SessionStatusView> {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const view = await client.status(sessionId);
    if (done(view)) return view;
    if (Date.now() > deadline) throw new Error(`session ${sessionId} did not get there within 120 s (status ${view.status})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
