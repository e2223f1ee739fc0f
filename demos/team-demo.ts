/**
 * The `team` demo (`orchard demo team`, and `npm start` after route-first): a team whose Coordinator and Members
 * are played by a scenario's `coordinator` and `members` builds a small tested program in a fixture repository.
 * When the scenario has a `driver.reassign`, the demo — as the user, through the client — reassigns that task to
 * another member while its execution is still writing. The result is checked from the team's status, Postgres,
 * git and the files on disk: delivered, one certificate whose evidence is the board's tasks and outputs (the
 * replacement's output; the cancelled original through its user event), the receipt's trail requested → yielding
 * → released, the old writer's last timestamp before the new writer's first, and the tested program passing
 * `node --test` when checked out afresh.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Pool } from 'pg';
import { loadScenario, type Scenario } from '../activities/model/scenario';
import type { ReceiptView, TeamStatusView, VerifyTeamResult } from '../contract/messages';
import { OrchardError, type OrchardClient } from '../client/client';
import { formatTeamReport, readTeamRecord, type TeamReport } from '../cli/team-view';

export const TEAM_DEMO_GOAL =
  'Build a poker hand evaluator with tests: evaluator.js (evaluate and compare five-card hands) and evaluator.test.js, run with node --test.';

type Reassign = NonNullable<NonNullable<Scenario['driver']>['reassign']>;
type Pause = NonNullable<NonNullable<Scenario['driver']>['pause']>;
type Verify = NonNullable<NonNullable<Scenario['driver']>['verify']>;

/** The pause as the run's facts have it: the receipts it fenced (kind `pause`) and the writer it stopped. */
interface PauseFacts {
  readonly taskId: string;
  readonly reason: string;
  readonly receipts: readonly ReceiptView[];
  /** The writer's log when the team was paused, read again a moment later: it must not grow while paused. */
  readonly writer: WriterFacts | null;
  readonly resumed: boolean;
}

/** The verify command's runs (team_verifications, oldest first), the certificate's binding, and `team verify` again. */
interface VerifyFacts {
  readonly command: string;
  readonly failsFirst: boolean;
  readonly runs: readonly { verificationId: string; purpose: string; exitCode: number | null; resultHead: string; durationMs: number; outputDigest: string }[];
  readonly recheck: VerifyTeamResult | null;
  readonly recheckError?: string;
}

/** One writer's timestamped log as found on disk (timestamps are nanoseconds since the epoch, as strings). */
export interface WriterFacts {
  readonly memberId: string;
  readonly sessionId: string;
  readonly path: string;
  readonly lines: number;
  readonly firstNs: string | null;
  readonly lastNs: string | null;
  /** The line count read again after a pause: equal to `lines` when the writer has stopped. */
  readonly linesAfterPause: number;
}

/** The handoff as the run's facts have it: the status query, the Postgres rows, and the two writers' files. */
interface HandoffFacts {
  readonly taskId: string;
  readonly to: string;
  readonly reason: string;
  /** The receipt of `taskId` in the team's status query. */
  readonly receipt: ReceiptView | null;
  /** Its row in team_handoff_receipts. */
  readonly row: { receiptId: string; state: string; oldTaskId: string; newTaskId: string; owner: string; sessionId: string; sloMissed: boolean } | null;
  /** The user event the old task's cancel cites (team_user_events). */
  readonly userEvent: { eventId: string; kind: string; taskId: string | null; text: string } | null;
  readonly oldWriter: WriterFacts | null;
  readonly newWriter: WriterFacts | null;
  /** New writer's first timestamp minus the old writer's last, in milliseconds (negative: they overlapped). */
  readonly gapMs: number | null;
}

export interface TeamDemoResult extends TeamReport {
  readonly teamId: string;
  /** Present when the scenario's driver reassigned a task. */
  readonly handoff?: HandoffFacts;
  /** Present when the scenario's driver paused the team. */
  readonly pause?: PauseFacts;
  /** Present when the team was started with the scenario's verify command. */
  readonly verify?: VerifyFacts;
  /** What the check found wrong; empty when it passed. */
  readonly problems: readonly string[];
}

export interface TeamDemoOptions {
  readonly teamId: string;
  readonly repo: string;
  /** Absolute path of the scenario (readable by the worker): it plays the Coordinator and the members. */
  readonly scenario: string;
  readonly host?: string;
  readonly log?: (line: string) => void;
  readonly timeoutMs?: number;
}

export async function runTeamDemo(client: OrchardClient, pool: Pool, options: TeamDemoOptions): Promise<TeamDemoResult> {
  const log = options.log ?? (() => undefined);
  const scenario = await loadScenario(options.scenario);
  if (!scenario.coordinator || !scenario.members) {
    throw new OrchardError('scenario_invalid', `scenario ${options.scenario} needs a coordinator and members (scenarios/FORMAT.md)`);
  }
  const model = { provider: 'scripted' as const, scenario: options.scenario };
  const deadline = Date.now() + (options.timeoutMs ?? 240_000);
  const verify = scenario.driver?.verify;
  const goal = scenario.driver?.goal ?? TEAM_DEMO_GOAL;
  await client.startTeam({
    teamId: options.teamId,
    repo: options.repo,
    host: options.host,
    goal,
    model,
    memberModel: model,
    ...(verify ? { verify: { command: verify.command, ...(verify.timeoutMs ? { timeoutMs: verify.timeoutMs } : {}) } } : {}),
  });
  log(`started team ${options.teamId}${verify ? ` (verify: ${verify.command})` : ''}: ${goal}`);
  const driverProblems: string[] = [];
  const progress = progressLog(log);
  let pause: PauseFacts | undefined;
  if (scenario.driver?.pause) {
    try {
      pause = await pauseWhileWriting(client, options.teamId, scenario.driver.pause, deadline, log, progress);
    } catch (err) {
      if (!(err instanceof OrchardError)) throw err;
      driverProblems.push(`the pause of ${scenario.driver.pause.taskId} did not happen: ${err.code}: ${err.message}`);
    }
  }
  const reassign = scenario.driver?.reassign;
  if (reassign) {
    try {
      await reassignWhileWriting(client, options.teamId, reassign, deadline, log, progress);
    } catch (err) {
      if (!(err instanceof OrchardError)) throw err;
      driverProblems.push(`the reassign of ${reassign.taskId} did not happen: ${err.code}: ${err.message}`);
    }
  }
  const status = await waitForOutcome(client, options.teamId, deadline, progress);
  const record = await readTeamRecord(pool, options.teamId);
  const handoff = reassign ? await readHandoffFacts(client, pool, status, reassign) : undefined;
  const verified = verify ? await readVerifyFacts(client, pool, status, verify, log) : undefined;
  const problems = [
    ...driverProblems,
    ...(await checkTeamDemo(client, pool, { status, ...record }, options.repo, handoff)),
    ...(pause ? checkPause(pause) : []),
    ...(verified ? checkVerify(verified, { status, ...record }) : []),
  ];
  return {
    teamId: options.teamId,
    status,
    ...record,
    ...(handoff ? { handoff } : {}),
    ...(pause ? { pause } : {}),
    ...(verified ? { verify: verified } : {}),
    problems,
  };
}

/**
 * Pauses the team as the user would (`orchard team pause`) while `pause.taskId` writes; waits until it is paused and
 * every pause receipt is settled, reads the writer's log twice (it must have stopped), then resumes the team.
 */
async function pauseWhileWriting(
  client: OrchardClient,
  teamId: string,
  pause: Pause,
  deadline: number,
  log: (line: string) => void,
  progress: (v: TeamStatusView) => void,
): Promise<PauseFacts> {
  const { execution, lines } = await waitUntilWriting(client, teamId, pause, deadline, log, progress);
  log(`the user pauses the team while ${pause.taskId} writes (${lines} lines so far): ${pause.reason}`);
  const paused = await client.teamLifecycle(teamId, 'pause', { reason: pause.reason, requestId: `${teamId}/pause` });
  log(`paused at revision ${paused.workRevision}: ${paused.receipts.map((r) => `${r.receiptId} fences ${r.oldTaskId}`).join(', ') || 'nothing was running'}`);
  let settled: TeamStatusView;
  for (;;) {
    settled = await client.teamStatus(teamId);
    progress(settled);
    const mine = settled.receipts.filter((r) => r.kind === 'pause');
    if (settled.status === 'paused' && mine.length > 0 && mine.every((r) => r.state !== 'requested' && r.state !== 'yielding')) break;
    if (Date.now() > deadline) throw new OrchardError('wait_timeout', 'the pause receipts did not settle in time');
    await new Promise((r) => setTimeout(r, 100));
  }
  const writer = await writerFacts(client, execution.memberId, execution.sessionId, pause.log);
  const still = writer ? await afterPause(writer) : null;
  log(`paused: ${pause.taskId} is pending again for ${execution.memberId}; its writer stopped at ${still?.lines ?? 0} line(s)`);
  const resumed = await client.teamLifecycle(teamId, 'resume', { reason: 'the build machine is back', requestId: `${teamId}/resume` });
  log(`resumed at revision ${resumed.workRevision}: ${pause.taskId} starts again with ${execution.memberId}`);
  return {
    taskId: pause.taskId,
    reason: pause.reason,
    receipts: settled.receipts.filter((r) => r.kind === 'pause'),
    writer: still,
    resumed: resumed.state === 'running',
  };
}

function checkPause(p: PauseFacts): string[] {
  const problems: string[] = [];
  if (p.receipts.length === 0) problems.push(`the pause fenced nothing, though ${p.taskId} was running`);
  for (const r of p.receipts) if (r.state !== 'released') problems.push(`pause receipt ${r.receiptId} is ${r.state}, not released`);
  if (!p.writer || p.writer.lines === 0) problems.push(`no lines from ${p.taskId}'s writer before the pause`);
  else if (p.writer.linesAfterPause !== p.writer.lines)
    problems.push(`the writer kept writing while paused: ${p.writer.lines} lines, then ${p.writer.linesAfterPause}`);
  if (!p.resumed) problems.push('the team did not resume');
  return problems;
}

/** The verify command's runs from PostgreSQL, and `orchard team verify` run once more on the certified tree. */
async function readVerifyFacts(client: OrchardClient, pool: Pool, status: TeamStatusView, verify: Verify, log: (line: string) => void): Promise<VerifyFacts> {
  const { rows } = await pool.query(
    `SELECT verification_id, purpose, exit_code, result_head, duration_ms, output_digest FROM team_verifications WHERE team_id = $1 ORDER BY created_at`,
    [status.teamId],
  );
  const runs = rows.map((r) => ({
    verificationId: r.verification_id,
    purpose: r.purpose,
    exitCode: r.exit_code,
    resultHead: r.result_head,
    durationMs: r.duration_ms,
    outputDigest: r.output_digest,
  }));
  let recheck: VerifyTeamResult | null = null;
  let recheckError: string | undefined;
  if (status.status === 'delivered') {
    try {
      recheck = await client.verifyTeam(status.teamId, { requestId: `${status.teamId}/recheck` });
      log(
        `orchard team verify: ${recheck.stillPasses ? 'still passes' : 'NO LONGER PASSES'}; output ${recheck.outputMatches ? 'matches' : 'differs from'} the certified digest`,
      );
    } catch (err) {
      if (!(err instanceof OrchardError)) throw err;
      recheckError = `${err.code}: ${err.message}`;
    }
  }
  return { command: verify.command, failsFirst: verify.failsFirst, runs, recheck, ...(recheckError ? { recheckError } : {}) };
}

function checkVerify(v: VerifyFacts, report: TeamReport): string[] {
  const problems: string[] = [];
  const completion = v.runs.filter((r) => r.purpose === 'completion');
  if (v.failsFirst && !(completion.length >= 2 && completion[0].exitCode !== 0)) {
    problems.push(`the verify command was expected to fail first: runs ${completion.map((r) => r.exitCode).join(', ') || 'none'}`);
  }
  const bound = report.certificate?.verification;
  if (!bound?.verified) problems.push(`the certificate binds no verification: ${JSON.stringify(bound ?? null)}`);
  else {
    const run = completion.find((r) => r.verificationId === bound.verificationId);
    if (!run || run.exitCode !== 0) problems.push(`the certificate's verification ${bound.verificationId} is not a stored passing run`);
    if (bound.command !== v.command) problems.push(`the certificate binds ${bound.command}, not ${v.command}`);
    if (report.certificate?.result?.head !== bound.resultHead) problems.push(`the verification ran on ${bound.resultHead}, not the certified result`);
  }
  if (!v.recheck) problems.push(`orchard team verify did not answer${v.recheckError ? `: ${v.recheckError}` : ''}`);
  else if (!v.recheck.stillPasses) problems.push(`orchard team verify: no longer passes (exit ${v.recheck.run.exitCode})`);
  return problems;
}

function formatPause(p: PauseFacts): string[] {
  return [
    `pause: the user paused the team while ${p.taskId} was writing ("${p.reason}"), then resumed it`,
    ...p.receipts.map((r) => `  receipt ${r.receiptId} (${r.kind}): ${r.trail.join(' → ')}; ${r.oldTaskId} pending again for ${r.oldOwner}`),
    p.writer
      ? `  writer: ${p.writer.lines} line(s) in ${p.writer.path}; ${p.writer.linesAfterPause === p.writer.lines ? 'not one more while paused' : 'it GREW while paused'}`
      : '  writer: not found',
  ];
}

function formatVerify(v: VerifyFacts): string[] {
  return [
    `verify: ${v.command}`,
    ...v.runs.map(
      (r) =>
        `  ${r.purpose} ${r.verificationId}: exit ${r.exitCode ?? '-'} on ${r.resultHead.slice(0, 12)} in ${(r.durationMs / 1000).toFixed(1)} s (${r.outputDigest.slice(0, 19)}…)`,
    ),
  ];
}

/** A task whose execution the driver waits for: it runs and has written `lines` lines to `log` in its worktree. */
export interface WritingTask {
  readonly taskId: string;
  readonly log: string;
  readonly lines: number;
}

/**
 * Waits until `writing.taskId` runs and its execution has written `writing.lines` lines to its log; the running
 * execution. Throws `OrchardError` when that moment never comes (the task ended first, or the deadline passed).
 */
export async function waitUntilWriting(
  client: OrchardClient,
  teamId: string,
  writing: WritingTask,
  deadline: number,
  log: (line: string) => void,
  progress: (v: TeamStatusView) => void,
): Promise<{ execution: TeamStatusView['executions'][number]; lines: number }> {
  let announced = false;
  for (;;) {
    const v = await client.teamStatus(teamId);
    progress(v);
    const execution = v.executions.find((e) => e.taskId === writing.taskId);
    if (execution && execution.state !== 'running') {
      throw new OrchardError('task_not_in_progress', `task ${writing.taskId} ended ${execution.state} before its log had ${writing.lines} lines`);
    }
    if (execution) {
      // The execution may run before its member's session exists (or has a worktree): not writing yet.
      const session = await client.status(execution.sessionId).catch((err: unknown) => {
        if (err instanceof OrchardError && err.code === 'session_not_found') return undefined;
        throw err;
      });
      const path = session?.worktree ? join(session.worktree, writing.log) : undefined;
      const lines = path ? stampsOf(path).length : 0;
      if (!announced && lines > 0) log(`task ${writing.taskId} → ${execution.memberId} is writing ${path}`);
      announced ||= lines > 0;
      if (lines >= writing.lines) return { execution, lines };
    }
    if (Date.now() > deadline) throw new OrchardError('wait_timeout', `task ${writing.taskId} did not write ${writing.lines} lines to ${writing.log} in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Reassigns `reassign.taskId` to `reassign.to` as the user would (`orchard team reassign`), while it writes. */
async function reassignWhileWriting(
  client: OrchardClient,
  teamId: string,
  reassign: Reassign,
  deadline: number,
  log: (line: string) => void,
  progress: (v: TeamStatusView) => void,
): Promise<ReceiptView> {
  const { execution, lines } = await waitUntilWriting(client, teamId, reassign, deadline, log, progress);
  log(`the user reassigns ${reassign.taskId} from ${execution.memberId} to ${reassign.to} while it writes (${lines} lines so far): ${reassign.reason}`);
  const receipt = await client.reassignTask(teamId, { taskId: reassign.taskId, newOwner: reassign.to, reason: reassign.reason });
  log(`the fence committed: replacement ${receipt.newTaskId} (${receipt.newOwner}) waits for the old execution to be released`);
  return receipt;
}

/** Logs each execution state and receipt trail of the status the first time it is seen. */
export function progressLog(log: (line: string) => void): (v: TeamStatusView) => void {
  const seen = new Set<string>();
  return (v) => {
    const lines = [
      ...v.receipts.map((r) => `receipt ${r.receiptId}: ${r.trail.join(' → ')}${r.sloMissed ? ' (SLO missed)' : ''}`),
      ...v.executions.map((e) => `task ${e.taskId} → ${e.memberId}: ${e.state}`),
    ];
    for (const line of lines) if (!seen.has(line)) log(line);
    for (const line of lines) seen.add(line);
  };
}

/** Polls the status query until the run is delivered, or settles without it (a failed task, nothing running). */
async function waitForOutcome(client: OrchardClient, teamId: string, deadline: number, progress: (v: TeamStatusView) => void): Promise<TeamStatusView> {
  for (;;) {
    const v = await client.teamStatus(teamId);
    progress(v);
    if (v.status === 'delivered') return v;
    const settled = v.status === 'waiting_for_org_event' && v.executions.length > 0 && v.executions.every((e) => e.state !== 'running');
    if (settled && v.executions.some((e) => e.state === 'failed')) return v;
    if (Date.now() > deadline) return v;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The writer's log read again after a pause: a writer still running would have added lines. */
export async function afterPause(writer: WriterFacts): Promise<WriterFacts> {
  await new Promise((resolve) => setTimeout(resolve, 500));
  return { ...writer, linesAfterPause: stampsOf(writer.path).length };
}

const stampsOf = (path: string): bigint[] =>
  existsSync(path)
    ? readFileSync(path, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => BigInt(line.split(' ')[0]))
    : [];

/** A writer's log in the worktree of `sessionId`'s session, as the session reports its worktree. */
export async function writerFacts(client: OrchardClient, memberId: string, sessionId: string, log: string): Promise<WriterFacts | null> {
  const worktree = (await client.status(sessionId).catch(() => undefined))?.worktree;
  if (!worktree) return null;
  const path = join(worktree, log);
  const stamps = stampsOf(path);
  return {
    memberId,
    sessionId,
    path,
    lines: stamps.length,
    firstNs: stamps[0]?.toString() ?? null,
    lastNs: stamps.at(-1)?.toString() ?? null,
    linesAfterPause: stamps.length,
  };
}

/** Reads the handoff of `reassign.taskId` from the status query, Postgres and the two writers' files. */
async function readHandoffFacts(client: OrchardClient, pool: Pool, status: TeamStatusView, reassign: Reassign): Promise<HandoffFacts> {
  const teamId = status.teamId;
  const receipt = status.receipts.find((r) => r.oldTaskId === reassign.taskId) ?? null;
  const rowResult = await pool.query(
    `SELECT receipt_id, state, old_task_id, new_task_id, owner, session_id, slo_missed FROM team_handoff_receipts WHERE team_id = $1 AND old_task_id = $2`,
    [teamId, reassign.taskId],
  );
  const r = rowResult.rows[0];
  const row = r
    ? {
        receiptId: r.receipt_id,
        state: r.state,
        oldTaskId: r.old_task_id,
        newTaskId: r.new_task_id,
        owner: r.owner,
        sessionId: r.session_id,
        sloMissed: r.slo_missed,
      }
    : null;
  const cancel = (await pool.query(`SELECT cancel FROM team_tasks WHERE team_id = $1 AND task_id = $2`, [teamId, reassign.taskId])).rows[0]?.cancel;
  const eventRow = cancel?.userEventId
    ? (await pool.query(`SELECT event_id, kind, task_id, text FROM team_user_events WHERE team_id = $1 AND event_id = $2`, [teamId, cancel.userEventId]))
        .rows[0]
    : undefined;
  const userEvent = eventRow ? { eventId: eventRow.event_id, kind: eventRow.kind, taskId: eventRow.task_id, text: eventRow.text } : null;
  const oldWriter = row ? await writerFacts(client, row.owner, row.sessionId, reassign.log) : null;
  const replacement = row ? status.executions.find((e) => e.taskId === row.newTaskId) : undefined;
  const newWriter = replacement ? await writerFacts(client, replacement.memberId, replacement.sessionId, reassign.log) : null;
  const again = oldWriter ? await afterPause(oldWriter) : null;
  const gapMs = oldWriter?.lastNs && newWriter?.firstNs ? Number(BigInt(newWriter.firstNs) - BigInt(oldWriter.lastNs)) / 1e6 : null;
  return { taskId: reassign.taskId, to: reassign.to, reason: reassign.reason, receipt, row, userEvent, oldWriter: again, newWriter, gapMs };
}

/** What is wrong with the handoff, from its facts and the certificate: empty when it happened as invariant 14 says. */
function checkHandoff(h: HandoffFacts, report: TeamReport): string[] {
  const problems: string[] = [];
  const { board, certificate } = report;
  if (!h.receipt) problems.push(`the status shows no receipt for ${h.taskId}`);
  else if (h.receipt.trail.join(' → ') !== 'requested → yielding → released')
    problems.push(`the receipt's trail is ${h.receipt.trail.join(' → ')}, not requested → yielding → released`);
  if (!h.row) return [...problems, `no team_handoff_receipts row for ${h.taskId}`];
  if (h.row.state !== 'released') problems.push(`the receipt row ${h.row.receiptId} is ${h.row.state}, not released`);
  if (h.receipt && h.receipt.receiptId !== h.row.receiptId) problems.push(`the status's receipt ${h.receipt.receiptId} is not the row ${h.row.receiptId}`);
  const old = board?.tasks.find((t) => t.id === h.taskId);
  const replacement = board?.tasks.find((t) => t.id === h.row!.newTaskId);
  if (!old || old.status !== 'cancelled' || old.cancel?.by !== 'user' || old.cancel.kind !== 'reassign') {
    problems.push(`task ${h.taskId} is not cancelled by the user for a reassign: ${JSON.stringify(old ?? null)}`);
  }
  if (!h.userEvent || h.userEvent.taskId !== h.taskId) problems.push(`task ${h.taskId}'s cancel cites no user event about it: ${JSON.stringify(h.userEvent)}`);
  if (!replacement || replacement.replacesTaskId !== h.taskId || replacement.owner !== h.to || replacement.status !== 'completed') {
    problems.push(`the replacement ${h.row.newTaskId} is not ${h.to}'s completed replacement of ${h.taskId}: ${JSON.stringify(replacement ?? null)}`);
  }
  if (certificate) {
    const resolution = (id: string) => certificate.resolutions.find((r) => r.taskId === id);
    const oldResolution = resolution(h.taskId);
    if (oldResolution?.kind !== 'replaced_by' || oldResolution.by !== h.row.newTaskId) {
      problems.push(`the certificate does not count ${h.taskId} through its replacement ${h.row.newTaskId}: ${JSON.stringify(oldResolution ?? null)}`);
    }
    if (resolution(h.row.newTaskId)?.kind !== 'completed' || !replacement?.outputId || !certificate.evidence.outputIds.includes(replacement.outputId)) {
      problems.push(`the certificate does not cite ${h.row.newTaskId}'s output ${replacement?.outputId ?? '-'}`);
    }
  }
  const { oldWriter: o, newWriter: n } = h;
  if (!o || o.lines === 0) problems.push(`no timestamps from the old writer (${o?.path ?? `${h.row.sessionId}: no worktree`})`);
  if (!n || n.lines === 0) problems.push(`no timestamps from the new writer (${n?.path ?? 'no replacement execution'})`);
  if (o?.lastNs && n?.firstNs && !(BigInt(o.lastNs) < BigInt(n.firstNs))) {
    problems.push(`the writers overlapped: the old writer's last line (${o.lastNs}) is not before the new writer's first (${n.firstNs})`);
  }
  if (o && o.linesAfterPause !== o.lines) problems.push(`the old writer is still writing: ${o.lines} lines, then ${o.linesAfterPause}`);
  return problems;
}

/**
 * The check: delivered; exactly one certificate row, whose evidence is the board's tasks and the outputs of its
 * completed tasks; every task completed with an output row of its own, or cancelled by the user citing a user
 * event about it; the final Coordinator answer cites the certificate; every member branch that completed a task
 * has a commit of its own; each branch with tests, checked out afresh, passes `node --test`; and the handoff,
 * when there was one, passes `checkHandoff`.
 */
async function checkTeamDemo(client: OrchardClient, pool: Pool, report: TeamReport, repo: string, handoff?: HandoffFacts): Promise<string[]> {
  const { status, board, certificate } = report;
  const problems: string[] = [];
  if (status.status !== 'delivered') problems.push(`the run is ${status.status}, not delivered`);
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1`, [status.teamId]);
  if (rows[0].n !== 1) problems.push(`${rows[0].n} certificate rows, expected exactly 1`);
  if (!board) return [...problems, 'no board rows in PostgreSQL'];
  if (board.tasks.length === 0) problems.push('the board has no task');
  const events = (await pool.query(`SELECT event_id, task_id FROM team_user_events WHERE team_id = $1`, [status.teamId])).rows;
  for (const task of board.tasks) {
    if (task.status === 'cancelled' && task.cancel?.by === 'user') {
      if (!events.some((e) => e.event_id === task.cancel!.userEventId && e.task_id === task.id))
        problems.push(`task ${task.id} is cancelled by the user without a user event about it`);
    } else if (task.status !== 'completed') problems.push(`task ${task.id} is ${task.status}, not completed`);
    else if (!task.outputId || !board.outputs.some((o) => o.id === task.outputId && o.taskId === task.id)) {
      problems.push(`task ${task.id} is completed without an output row of its own`);
    }
  }
  if (certificate) {
    const same = (a: readonly string[], b: readonly string[]) => [...a].sort().join() === [...b].sort().join();
    if (
      !same(
        certificate.evidence.taskIds,
        board.tasks.map((t) => t.id),
      )
    )
      problems.push(`the certificate's tasks (${certificate.evidence.taskIds.join(', ')}) are not the board's`);
    const outputs = board.tasks.filter((t) => t.status === 'completed').map((t) => t.outputId ?? '');
    if (!same(certificate.evidence.outputIds, outputs))
      problems.push(`the certificate's outputs (${certificate.evidence.outputIds.join(', ')}) are not the completed tasks' (${outputs.join(', ')})`);
    const answer = status.turns.at(-1)?.finalExcerpt ?? '';
    if (!answer.includes(certificate.certificateId))
      problems.push(`the Coordinator's final answer does not cite ${certificate.certificateId}: ${JSON.stringify(answer)}`);
  } else problems.push('no certificate in PostgreSQL');
  // Each member's work is on its own branch; a branch with tests must pass them, and some branch must have them.
  // A handed-off execution was stopped before it finished: its branch need not have a commit.
  const sessions = [...new Set(status.executions.filter((e) => e.state === 'completed').map((e) => e.sessionId))];
  let tested = 0;
  for (const sessionId of sessions) {
    const session = await client.status(sessionId);
    const branch = session.branch;
    if (!branch) {
      problems.push(`member session ${sessionId} has no branch`);
      continue;
    }
    const ahead = execFileSync('git', ['rev-list', '--count', `main..${branch}`], { cwd: repo })
      .toString()
      .trim();
    if (ahead === '0') problems.push(`${branch} has no commit of its own`);
    const files = execFileSync('git', ['ls-tree', '-r', '--name-only', branch], { cwd: repo }).toString().split('\n');
    if (!files.some((f) => f.endsWith('.test.js'))) continue;
    tested += 1;
    const verdict = nodeTestAt(repo, branch);
    if (verdict) problems.push(verdict);
  }
  if (tested === 0) problems.push('no member branch has a test file (*.test.js)');
  if (handoff) problems.push(...checkHandoff(handoff, report));
  return problems;
}

/** Checks `branch` out into a fresh directory and runs `node --test` there; the problem, or undefined when it passes. */
function nodeTestAt(repo: string, branch: string): string | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-team-demo-'));
  try {
    const archive = execFileSync('git', ['archive', branch], { cwd: repo });
    execFileSync('tar', ['-x', '-C', dir], { input: archive });
    const run = spawnSync(process.execPath, ['--test'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    if (run.status === 0 && /# pass [1-9]/.test(run.stdout)) return undefined;
    return `node --test on ${branch} did not pass (exit ${run.status}): ${(run.stdout + run.stderr).split('\n').slice(-8).join(' ').trim()}`;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Nanoseconds since the epoch as an ISO time with nine fraction digits. */
export function isoNs(ns: string | null): string {
  if (ns === null) return '-';
  const n = BigInt(ns);
  return `${new Date(Number(n / 1_000_000n)).toISOString().slice(0, 19)}.${(n % 1_000_000_000n).toString().padStart(9, '0')}Z`;
}

function formatHandoff(h: HandoffFacts): string[] {
  const lines = [`handoff: the user reassigned ${h.taskId} to ${h.to} while it was writing ("${h.reason}")`];
  if (h.receipt)
    lines.push(
      `  receipt ${h.receipt.receiptId}: ${h.receipt.trail.join(' → ')} (SLO ${h.receipt.sloMissed ? 'missed' : 'met'}); ${h.receipt.oldTaskId} (${h.receipt.oldOwner}) → ${h.receipt.newTaskId} (${h.receipt.newOwner})`,
    );
  else lines.push('  receipt: none in the status');
  lines.push(
    `  PostgreSQL: receipt row ${h.row ? `${h.row.receiptId} is ${h.row.state}` : 'missing'}; user event ${h.userEvent ? `${h.userEvent.eventId} (${h.userEvent.kind} of ${h.userEvent.taskId})` : 'missing'}`,
  );
  for (const [label, w] of [
    ['old writer', h.oldWriter],
    ['new writer', h.newWriter],
  ] as const) {
    lines.push(w ? `  ${label}: ${w.memberId}, ${w.lines} line(s) in ${w.path}: first ${isoNs(w.firstNs)}, last ${isoNs(w.lastNs)}` : `  ${label}: not found`);
  }
  if (h.gapMs !== null) {
    lines.push(
      h.gapMs > 0
        ? `  no overlap: the old writer's last line precedes the new writer's first by ${h.gapMs.toFixed(3)} ms; the old log did ${h.oldWriter?.linesAfterPause === h.oldWriter?.lines ? 'not grow' : 'GROW'} after the run`
        : `  OVERLAP: the new writer's first line is ${(-h.gapMs).toFixed(3)} ms before the old writer's last`,
    );
  }
  return lines;
}

/** The report, the handoff, the certificate's evidence per task and the verdict. */
export function formatTeamDemo(result: TeamDemoResult): string {
  const lines = [formatTeamReport(result, { hasDatabase: true }), ''];
  if (result.handoff) lines.push(...formatHandoff(result.handoff), '');
  if (result.pause) lines.push(...formatPause(result.pause), '');
  if (result.verify) lines.push(...formatVerify(result.verify), '');
  if (result.certificate && result.board) {
    lines.push(`evidence of certificate ${result.certificate.certificateId}:`);
    for (const taskId of result.certificate.evidence.taskIds) {
      const task = result.board.tasks.find((t) => t.id === taskId);
      const resolution = result.certificate.resolutions.find((r) => r.taskId === taskId);
      const output = result.board.outputs.find((o) => o.id === task?.outputId);
      const how =
        resolution?.kind === 'user_scope_removed'
          ? `cancelled by the user: user event ${resolution.userEventId}`
          : resolution?.kind === 'replaced_by'
            ? `replaced by ${resolution.by}`
            : `output ${task?.outputId ?? '-'}${output ? ` (execution ${output.executionId})` : ''}`;
      lines.push(`  ${taskId} (${task?.owner ?? '-'}) → ${how}`);
    }
    lines.push('');
  }
  const tasks = result.board?.tasks ?? [];
  const verdict = [
    `team: ok: delivered with one certificate; ${tasks.length} task(s)`,
    result.handoff
      ? `${result.handoff.taskId} reassigned while writing, receipt requested → yielding → released, the writers never overlapped`
      : 'each completed with an output',
    ...(result.pause ? [`paused while ${result.pause.taskId} wrote and resumed, its writer stopped while paused`] : []),
    ...(result.verify
      ? [
          `the certificate binds a passing run of ${result.verify.command}${result.verify.failsFirst ? ' after a failed one and a fix' : ''}, and it still passes`,
        ]
      : []),
    'the tested program passes node --test',
  ].join('; ');
  lines.push(result.problems.length === 0 ? verdict : `team: FAILED:\n${result.problems.map((p) => `  - ${p}`).join('\n')}`);
  return lines.join('\n');
}
