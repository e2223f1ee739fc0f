/**
 * The `team-all-cancelled` demo (`orchard demo team-all-cancelled`): a team plays a scenario whose `driver.cancelAll`
 * says what the user does. Once the task it names is running and writing, the demo — as the user, through the
 * client — cancels every task of the board (the running one is fenced and yielded, with a receipt; the others are
 * cancelled before they run), waits until the cancelled execution is released, and asks the Coordinator to
 * complete the run. The Coordinator's `org_run_complete` is refused, and the run ends not delivered. The check
 * reads facts — the status query, the board, user events and certificates in Postgres, the closure validator on
 * that board, the writer's log on disk — and the demo prints why the run is not delivered: the validator's reasons.
 */
import type { Pool } from 'pg';
import { loadScenario } from '../activities/model/scenario';
import { closureInputOf, readBoard } from '../activities/store/team';
import type { ReceiptView, TeamStatusView } from '../contract/messages';
import { validateClosure, type ClosureOutcome, type ClosureReason } from '../workflows/team/closure';
import { OrchardError, type OrchardClient } from '../client/client';
import { afterPause, isoNs, progressLog, TEAM_DEMO_GOAL, waitUntilWriting, writerFacts, type TeamDemoOptions, type WriterFacts } from './team-demo';
import { formatTeamReport, readTeamRecord, type TeamReport } from '../cli/team-view';

export interface TeamAllCancelledResult extends TeamReport {
  readonly teamId: string;
  /** The closure validator on the board as Postgres has it at the end: why the run is not delivered. */
  readonly closure: { readonly outcome: ClosureOutcome; readonly reasons: readonly ClosureReason[] };
  /** Certificate rows of the run in team_certificates (expected: none). */
  readonly certificates: number;
  /** The log of the execution cancelled while it wrote. */
  readonly writer: WriterFacts | null;
  /** What the check found wrong; empty when it passed. */
  readonly problems: readonly string[];
}

/** As the team demo's; the scenario needs `driver.cancelAll`. */
export type TeamAllCancelledOptions = TeamDemoOptions;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function runTeamAllCancelledDemo(client: OrchardClient, pool: Pool, options: TeamAllCancelledOptions): Promise<TeamAllCancelledResult> {
  const log = options.log ?? (() => undefined);
  const scenario = await loadScenario(options.scenario);
  const plan = scenario.driver?.cancelAll;
  if (!scenario.coordinator || !scenario.members || !plan) {
    throw new OrchardError('scenario_invalid', `scenario ${options.scenario} needs a coordinator, members and driver.cancelAll (scenarios/FORMAT.md)`);
  }
  const model = { provider: 'scripted' as const, scenario: options.scenario };
  const deadline = Date.now() + (options.timeoutMs ?? 240_000);
  const teamId = options.teamId;
  await client.startTeam({ teamId, repo: options.repo, host: options.host, goal: TEAM_DEMO_GOAL, model, memberModel: model });
  log(`started team ${teamId}: ${TEAM_DEMO_GOAL}`);
  const progress = progressLog(log);
  const problems: string[] = [];
  let writerSession: { memberId: string; sessionId: string } | undefined;
  try {
    const { execution, lines } = await waitUntilWriting(client, teamId, plan, deadline, log, progress);
    writerSession = { memberId: execution.memberId, sessionId: execution.sessionId };
    // Every task on the board, as Postgres has it now; the running one first, so it is cancelled while it writes.
    const board = await readBoard(pool, teamId);
    const open = board.tasks.filter((t) => t.status !== 'cancelled' && t.status !== 'completed' && t.status !== 'failed');
    const ordered = [...open.filter((t) => t.taskId === plan.taskId), ...open.filter((t) => t.taskId !== plan.taskId)];
    log(`the user cancels every task (${ordered.map((t) => t.taskId).join(', ')}); ${plan.taskId} has written ${lines} lines so far`);
    for (const task of ordered) {
      const cancelled = await client.cancelTask(teamId, { taskId: task.taskId, reason: plan.reason });
      log(
        `cancelled ${task.taskId} at revision ${cancelled.workRevision}${cancelled.receipt ? `: receipt ${cancelled.receipt.receiptId} ${cancelled.receipt.state}` : ' before it ran'}`,
      );
    }
    // The cancelled execution is stopped and released; the Coordinator has read every wake.
    await until(
      client,
      teamId,
      deadline,
      progress,
      'the cancelled execution released and the Coordinator idle',
      (v) => quiet(v) && v.receipts.every((r) => r.state !== 'requested' && r.state !== 'yielding'),
    );
    const before = (await client.teamStatus(teamId)).turns.at(-1)?.turn ?? 0;
    const sent = await client.teamMessage(teamId, { text: plan.message, requestId: `${teamId}/complete` });
    log(`the user asks the Coordinator (${sent.messageId}): ${plan.message}`);
    const answered = await until(client, teamId, deadline, progress, 'the Coordinator answered', (v) => quiet(v) && (v.turns.at(-1)?.turn ?? 0) > before);
    log(`the Coordinator answered: ${answered.turns.at(-1)?.finalExcerpt ?? '-'}`);
  } catch (err) {
    if (!(err instanceof OrchardError)) throw err;
    problems.push(`the driver stopped: ${err.code}: ${err.message}`);
  }
  const status = await client.teamStatus(teamId);
  const record = await readTeamRecord(pool, teamId);
  const board = await readBoard(pool, teamId);
  const closure = validateClosure(closureInputOf(board, status.executions.filter((e) => e.state === 'running').length));
  const certificates = (await pool.query(`SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1`, [teamId])).rows[0].n as number;
  const found = writerSession ? await writerFacts(client, writerSession.memberId, writerSession.sessionId, plan.log) : null;
  const writer = found ? await afterPause(found) : null;
  const userEvents = (await pool.query(`SELECT event_id, task_id FROM team_user_events WHERE team_id = $1`, [teamId])).rows as {
    event_id: string;
    task_id: string | null;
  }[];

  // The check: nothing delivered, and why.
  if (status.status === 'delivered' || status.certificate)
    problems.push(`the run is ${status.status}${status.certificate ? ` with certificate ${status.certificate.certificateId}` : ''}`);
  if (certificates !== 0) problems.push(`${certificates} certificate row(s), expected none`);
  if (closure.outcome === 'delivered') problems.push('the closure validator finds the board delivered');
  if (!closure.reasons.some((r) => r.code === 'all_cancelled'))
    problems.push(`the validator's reasons do not say every task is cancelled: ${closure.reasons.map((r) => r.code).join(', ') || 'none'}`);
  if (board.tasks.length === 0) problems.push('the board has no task');
  for (const task of board.tasks) {
    if (task.status !== 'cancelled' || task.cancel?.by !== 'user') problems.push(`task ${task.taskId} is ${task.status}, not cancelled by the user`);
    else if (!userEvents.some((e) => e.event_id === task.cancel!.userEventId && e.task_id === task.taskId))
      problems.push(`task ${task.taskId}'s cancel cites no user event about it`);
  }
  const receipt = status.receipts.find((r) => r.oldTaskId === plan.taskId);
  if (!receipt) problems.push(`no receipt for ${plan.taskId}, the task cancelled while it ran`);
  for (const r of status.receipts) {
    if (r.kind !== 'cancel' || r.trail.join(' → ') !== 'requested → yielding → released')
      problems.push(`receipt ${r.receiptId} (${r.kind}) went ${r.trail.join(' → ')}, not requested → yielding → released`);
  }
  const rows = (await pool.query(`SELECT receipt_id, state FROM team_handoff_receipts WHERE team_id = $1`, [teamId])).rows as {
    receipt_id: string;
    state: string;
  }[];
  for (const row of rows) if (row.state !== 'released') problems.push(`receipt row ${row.receipt_id} is ${row.state}, not released`);
  if (!status.refusals.some((r) => r.tool === 'org_run_complete' && r.code === 'completion_refused')) {
    problems.push(`the Coordinator's org_run_complete was not refused: refusals ${JSON.stringify(status.refusals)}`);
  }
  if (!writer || writer.lines < plan.lines) problems.push(`the cancelled execution's log has ${writer?.lines ?? 0} lines (expected at least ${plan.lines})`);
  else if (writer.linesAfterPause !== writer.lines)
    problems.push(`the cancelled execution is still writing: ${writer.lines} lines, then ${writer.linesAfterPause}`);

  return {
    teamId,
    ...record,
    status,
    closure: { outcome: closure.outcome, reasons: closure.reasons },
    certificates,
    writer,
    problems,
  };
}

/** The run has nothing in flight: no Coordinator turn, no queued message, no running execution. */
const quiet = (v: TeamStatusView) => v.status !== 'coordinating' && v.queuedMessages === 0 && v.executions.every((e) => e.state !== 'running');

async function until(
  client: OrchardClient,
  teamId: string,
  deadline: number,
  progress: (v: TeamStatusView) => void,
  what: string,
  probe: (v: TeamStatusView) => boolean,
): Promise<TeamStatusView> {
  for (;;) {
    const v = await client.teamStatus(teamId);
    progress(v);
    if (probe(v)) return v;
    if (Date.now() > deadline) throw new OrchardError('wait_timeout', `gave up waiting for ${what}`);
    await sleep(250);
  }
}

function formatReceipt(r: ReceiptView): string {
  return `  receipt ${r.receiptId} (${r.kind}): ${r.oldTaskId} (${r.oldOwner}) ${r.trail.join(' → ')}${r.sloMissed ? ' (SLO missed)' : ''}`;
}

/** The report, the receipts, the writer's log, why the run is not delivered, and the verdict. */
export function formatTeamAllCancelled(result: TeamAllCancelledResult): string {
  const lines = [formatTeamReport(result, { hasDatabase: true }), ''];
  lines.push(`receipts (${result.status.receipts.length}):`, ...(result.status.receipts.length ? result.status.receipts.map(formatReceipt) : ['  none']));
  const w = result.writer;
  lines.push(
    w
      ? `  the cancelled writer (${w.memberId}): ${w.lines} line(s) in ${w.path}, last ${isoNs(w.lastNs)}; ${w.linesAfterPause === w.lines ? 'no line since' : `STILL WRITING (${w.linesAfterPause} lines)`}`
      : '  the cancelled writer: no log found',
  );
  lines.push('', `certificates: ${result.certificates}`);
  lines.push(`why not delivered (closure validator on the board in PostgreSQL: ${result.closure.outcome}):`);
  lines.push(
    ...(result.closure.reasons.length ? result.closure.reasons.map((r) => `  - ${r.code}${r.taskId ? ` (${r.taskId})` : ''}: ${r.detail}`) : ['  none']),
  );
  const refusal = result.status.refusals.find((r) => r.tool === 'org_run_complete');
  const answer = result.status.turns.at(-1)?.finalExcerpt;
  lines.push(`the Coordinator's org_run_complete: ${refusal ? `refused, ${refusal.code}` : 'not refused'}${answer ? `; its answer: ${answer}` : ''}`, '');
  lines.push(
    result.problems.length === 0
      ? `team-all-cancelled: ok: not delivered (${result.closure.outcome}: ${result.closure.reasons.map((r) => r.code).join(', ')}); every task cancelled by the user, no certificate`
      : `team-all-cancelled: FAILED:\n${result.problems.map((p) => `  - ${p}`).join('\n')}`,
  );
  return lines.join('\n');
}
