/**
 * What each kind of workflow shows as its Current Details in the Temporal Web UI (`setCurrentDetails`, which costs no
 * history): Markdown built from the workflow's own view, every user- or agent-written piece escaped (./markdown.ts).
 * Pure, so a unit test parses exactly what a workflow publishes.
 */
import type { BudgetView, OrchestratorStatusView, SessionStatusView, TaskExecutionInput, TeamStatusView, TurnRef } from '../contract/messages';
import { mdBlocks, mdCode, mdTable, mdText } from '../contract/markdown';
import type { LedgerChild } from './orchestrator/ledger';
import { routableChildren } from './orchestrator/roster';

/** Rows kept in a table: the Web UI shows the details in a box, and the full record is one query away. */
const TABLE_ROWS = 20;

/** A failure as one line: its code as code, its message as text. */
function failure(error: { readonly code: string; readonly message: string }): string {
  return `${mdCode(error.code)} — ${mdText(error.message, 400)}`;
}

function lastTurnBlocks(label: string, turn: TurnRef | undefined): string[] {
  if (!turn) return [];
  return [
    `last ${label}: turn ${turn.turn} **${mdText(turn.outcome)}** (${turn.steps} steps, ${turn.toolCalls} tool calls)`,
    ...(turn.error ? [`**failure reason**: ${failure(turn.error)}`] : []),
    ...(turn.finalExcerpt ? [`> ${mdText(turn.finalExcerpt, 280)}`] : []),
  ];
}

/** Tokens spent, and against a budget the limit, escrow and what remains. */
function budgetLine(budget: BudgetView | undefined): string | undefined {
  if (!budget || (budget.limit === undefined && budget.spent === 0)) return undefined;
  if (budget.limit === undefined) return `tokens: ${budget.spent} spent (no budget)`;
  const escrow = budget.escrowed !== undefined ? ` · ${budget.escrowed} escrowed` : '';
  return `budget: ${budget.spent} of ${budget.limit} spent${escrow} · ${budget.remaining ?? 0} remaining${budget.exhausted ? ' · **exhausted**: raise it (`setBudget`) to go on' : ''}`;
}

/** How many rows a table left out, as a line under it. */
function omitted(total: number, shown: number, what: string): string | undefined {
  return total > shown ? `(${total - shown} older ${what} not shown; the status query has them)` : undefined;
}

export function sessionDetails(view: SessionStatusView): string {
  const tasks = view.tasks;
  return mdBlocks([
    `**${mdText(view.status)}**${view.closing ? ' (closing)' : ''} · ${view.turnsCompleted} turn(s) · ${view.queued} queued · run ${view.runIndex}`,
    `branch ${view.branch ? mdCode(view.branch) : '(preparing)'} on host ${mdCode(view.host)}`,
    view.held && '**HELD**: a command changed what this session must not; no command runs until a user resolves it (`resolveHold`)',
    view.confinement === 'unconfined' && '**UNCONFINED**: this isolated child runs with the guard alone (`ORCHARD_SANDBOX=off` on its host)',
    view.currentTask && `now: turn ${view.currentTask.turn} — ${mdText(view.currentTask.excerpt)}`,
    ...lastTurnBlocks('turn', view.lastTurn),
    tasks && `tasks: ${tasks.done} done · ${tasks.failed} failed · ${tasks.cancelled} cancelled · ${tasks.queued} queued`,
    view.refusedSignals?.count ? `refused signalled sends: ${view.refusedSignals.count}` : undefined,
    budgetLine(view.budget),
    view.error && `**error**: ${failure(view.error)}`,
  ]);
}

/** `ledger`: the children with their `system` mark (system agents are never shown, as never routed to). */
export function orchestratorDetails(view: OrchestratorStatusView, ledger: readonly LedgerChild[]): string {
  const children = ledger.filter((c) => !c.system);
  const inRoster = new Set(routableChildren(ledger).map((c) => c.childId));
  const newestFirst = [...children].sort((a, b) => b.lastActivity - a.lastActivity || a.childId.localeCompare(b.childId));
  const shown = newestFirst.slice(0, TABLE_ROWS);
  return mdBlocks([
    `**${mdText(view.status)}** · ${children.length} children · ${view.turnsCompleted} turn(s) · ${view.queued} queued · run ${view.runIndex}`,
    children.length === 0
      ? 'No child sessions yet.'
      : 'Child sessions, newest activity first. *In roster*: the model sees it and routes to it with `session send <id> <task>`.',
    shown.length > 0 &&
      mdTable(
        ['child', 'title', 'agent', 'status', 'in roster', 'turn ends'],
        shown.map((c) => [{ code: c.childId }, c.title, c.agent, c.status, inRoster.has(c.childId) ? 'yes' : 'no', String(c.turnEnds)]),
      ),
    omitted(children.length, shown.length, 'children'),
    ...lastTurnBlocks('turn', view.lastTurn),
    view.refusedSignals ? `refused signalled messages: ${view.refusedSignals}` : undefined,
    budgetLine(view.budget),
  ]);
}

/** `turnsCompleted`: over the whole run (the view keeps the latest turns only). */
export function teamDetails(view: TeamStatusView, turnsCompleted: number): string {
  const executions = view.executions.slice(-TABLE_ROWS);
  const receipts = view.receipts.slice(-TABLE_ROWS);
  const lastTurn = view.turns[view.turns.length - 1];
  const certificate = view.certificate;
  return mdBlocks([
    `**${mdText(view.outcome)}** (${mdText(view.status)}) · revision ${view.workRevision} · generation ${view.generation} · ${turnsCompleted} Coordinator turn(s)` +
      ` · plan ${view.planApproved ? 'approved' : 'not approved'}${view.candidate ? ` · completion ${mdText(view.candidate)}` : ''}`,
    view.outcomeBecause.length > 0 && `**${mdText(view.outcome.replace('_', ' '))}:** ${view.outcomeBecause.map((b) => mdText(b)).join('; ')}`,
    // What the run delivered first: the Web UI shows these details in a box of fixed height.
    certificate &&
      `**certificate** ${mdCode(certificate.certificateId)} · generation ${certificate.generation} · revision ${certificate.workRevision} · ` +
        `${certificate.taskIds.length} task(s)`,
    certificate?.resultBranch &&
      `**result branch** ${mdCode(certificate.resultBranch)}${certificate.resultHead ? ` at ${mdCode(certificate.resultHead.slice(0, 12))}` : ''}`,
    view.summary && `> ${mdText(view.summary.text, 400)}`,
    lastTurn &&
      `last Coordinator turn: ${lastTurn.turn} **${mdText(lastTurn.outcome)}** (${lastTurn.modelCalls} model calls, ${lastTurn.toolCalls} tool calls)`,
    receipts.length > 0 && '**Handoff receipts**',
    receipts.length > 0 &&
      mdTable(
        ['receipt', 'kind', 'task', 'from', 'to', 'state', 'SLO missed', 'trail', 'resolution'],
        receipts.map((r) => [
          { code: r.receiptId },
          r.kind,
          { code: r.newTaskId ? `${r.oldTaskId} → ${r.newTaskId}` : r.oldTaskId },
          { code: r.oldOwner },
          r.newOwner ? { code: r.newOwner } : '',
          r.state,
          r.sloMissed ? 'yes' : 'no',
          r.trail.join(' → '),
          r.resolution ?? '',
        ]),
      ),
    view.waiting.length > 0 &&
      `waiting for their previous execution: ${view.waiting.map((w) => `${mdCode(w.taskId)} (receipt ${mdCode(w.receiptId)})`).join(', ')}`,
    '**Board** (task executions, newest last)',
    executions.length === 0
      ? 'No task has started yet.'
      : mdTable(
          ['task', 'member', 'session', 'state'],
          executions.map((e) => [
            { code: e.taskId },
            { code: e.memberId },
            { code: e.sessionId },
            e.failure ? `${e.state}: ${e.failure.code} — ${e.failure.message}` : e.state,
          ]),
        ),
    omitted(view.executions.length, executions.length, 'executions'),
    '**Members**',
    mdTable(
      ['member', 'role', 'session'],
      view.members.map((m) => [{ code: m.memberId }, m.role, { code: m.sessionId }]),
    ),
    view.refusals.length > 0 && `refused Coordinator tool calls: ${view.refusals.length}`,
    view.refusedSignals ? `refused signalled messages: ${view.refusedSignals}` : undefined,
    budgetLine(view.budget),
  ]);
}

export function executionDetails(input: TaskExecutionInput, status: string, message?: string): string {
  return mdBlocks([
    `task ${mdCode(input.taskId)} → ${mdCode(input.memberId)} (session ${mdCode(input.sessionId)}): **${mdText(status)}**`,
    message && `reason: ${mdText(message, 400)}`,
  ]);
}
