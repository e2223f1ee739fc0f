/**
 * What `orchard team status` and `orchard demo team` show of a team: the workflow's status query, and from
 * Postgres the board (tasks, outputs) and the full certificate row. The workflow holds ids and revisions; the
 * board and the certificate live in the store, so both are read.
 */
import { budgetLine } from './budget-line';
import type { Pool } from 'pg';
import { readBoard, taskView, TeamStoreRefusal, type RunCompletionCertificate } from '../activities/store/team';
import type { TeamStatusView } from '../contract/messages';

interface TeamBoardView {
  readonly generation: number;
  readonly workRevision: number;
  readonly tasks: readonly {
    readonly id: string;
    readonly title: string;
    readonly owner: string | null;
    readonly status: string;
    readonly outputId: string | null;
    readonly replacesTaskId: string | null;
    readonly cancel: { by: string; kind?: string; reason?: string; userEventId?: string } | null;
    readonly failure: { code: string; message: string } | null;
  }[];
  readonly outputs: readonly {
    readonly id: string;
    readonly taskId: string;
    readonly executionId: string;
    readonly generation: number;
    readonly summary: string;
  }[];
  readonly inboxUnread: number;
}

export interface TeamReport {
  readonly status: TeamStatusView;
  /** Null when the CLI has no database (or the run's rows are not written yet). */
  readonly board: TeamBoardView | null;
  /** The newest certificate row of the run, as stored; null when there is none (or no database). */
  readonly certificate: RunCompletionCertificate | null;
}

/** The board and the certificate of `teamId` from Postgres; `board: null` when the run has no row yet. */
export async function readTeamRecord(pool: Pool, teamId: string): Promise<Pick<TeamReport, 'board' | 'certificate'>> {
  let board: TeamBoardView | null = null;
  try {
    const b = await readBoard(pool, teamId);
    board = {
      generation: b.generation,
      workRevision: b.workRevision,
      tasks: b.tasks.map(taskView),
      outputs: b.outputs.map((o) => ({ id: o.outputId, taskId: o.taskId, executionId: o.executionId, generation: o.generation, summary: o.summary })),
      inboxUnread: b.inboxUnread,
    };
  } catch (err) {
    if (!(err instanceof TeamStoreRefusal && err.code === 'team_not_found')) throw err;
  }
  const { rows } = await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 ORDER BY generation DESC, work_revision DESC LIMIT 1`, [
    teamId,
  ]);
  return { board, certificate: (rows[0]?.certificate as RunCompletionCertificate | undefined) ?? null };
}

/** The report as text: status line, board, executions, receipts, candidate and certificate, Coordinator turns and refusals. */
export function formatTeamReport({ status: v, board, certificate }: TeamReport, options: { hasDatabase: boolean }): string {
  const lines = [
    `team ${v.teamId} | ${v.outcome ?? v.status} (${v.status}) | revision ${v.workRevision} (read ${v.readRevision < 0 ? '-' : v.readRevision}) | generation ${v.generation} | plan ${v.planApproved ? 'approved' : 'not approved'}`,
    ...(v.outcomeBecause?.length ? [`  ${(v.outcome ?? '').replace('_', ' ')}: ${v.outcomeBecause.join('; ')}`] : []),
    `  goal: ${oneLine(v.goal)}`,
    `  members: ${v.members.map((m) => `${m.memberId} (${m.role})`).join(', ')}`,
    ...(v.budget ? [budgetLine(v.budget)!] : []),
  ];
  if (board) {
    lines.push('', `board (${board.tasks.length} task(s), revision ${board.workRevision}):`);
    if (board.tasks.length === 0) lines.push('  none');
    else {
      lines.push(
        ...table(
          ['task', 'title', 'owner', 'status', 'output', 'replaces', 'cancel', 'failure'],
          board.tasks.map((t) => [
            t.id,
            t.title,
            t.owner ?? '-',
            t.status,
            t.outputId ?? '-',
            t.replacesTaskId ?? '-',
            t.cancel ? `${t.cancel.by}${t.cancel.kind ? ` ${t.cancel.kind}` : ''}${t.cancel.reason ? `: ${t.cancel.reason}` : ''}` : '-',
            t.failure ? `${t.failure.code}: ${oneLine(t.failure.message)}` : '-',
          ]),
        ),
      );
    }
  } else {
    lines.push(
      '',
      options.hasDatabase ? 'board: no rows for this team yet' : 'board: not shown (set DATABASE_URL, or run `orchard dev`, to read it from PostgreSQL)',
    );
  }
  lines.push('', `executions (${v.executions.length}):`);
  if (v.executions.length === 0) lines.push('  none');
  else
    lines.push(
      ...table(
        ['task', 'member', 'state', 'session', 'workflow'],
        v.executions.map((e) => [
          e.taskId,
          e.memberId,
          e.failure ? `${e.state} (${e.failure.code}: ${oneLine(e.failure.message)})` : e.state,
          e.sessionId,
          e.workflowId ?? e.executionId,
        ]),
      ),
    );
  lines.push('', `handoff receipts (${v.receipts.length}):`);
  if (v.receipts.length === 0) lines.push('  none');
  else {
    lines.push(
      ...table(
        ['receipt', 'kind', 'old task', 'new task', 'state', 'trail', 'SLO', 'resolution'],
        v.receipts.map((r) => [
          r.receiptId,
          r.kind ?? 'reassign',
          `${r.oldTaskId} (${r.oldOwner})`,
          r.newTaskId ? `${r.newTaskId} (${r.newOwner})` : '-',
          r.state,
          r.trail.join(' → '),
          r.sloMissed ? 'missed' : 'met',
          r.resolution ?? '-',
        ]),
      ),
    );
  }
  for (const w of v.waiting) lines.push(`  ${w.taskId}: ${w.waiting} (${w.receiptId})`);
  lines.push('', `completion candidate: ${v.candidate ?? '-'}`);
  if (v.verification && !v.verification.passed) {
    const run = v.verification;
    lines.push(
      `verification FAILED: \`${oneLine(run.command)}\` ${run.timedOut ? 'timed out' : `exited ${run.exitCode ?? 'by a signal'}`} on ${run.resultHead.slice(0, 12)} (${run.verificationId}); output ends:`,
      ...run.excerpt
        .split('\n')
        .slice(-10)
        .map((line) => `  ${line}`),
    );
  }
  if (certificate) {
    lines.push(
      `certificate ${certificate.certificateId}: ${certificate.outcome} at generation ${certificate.generation}, revision ${certificate.workRevision} (${certificate.validatorVersion}, ${certificate.issuedAt})`,
      `  evidence tasks: ${certificate.evidence.taskIds.join(', ')}`,
      `  evidence outputs: ${certificate.evidence.outputIds.join(', ')}`,
      ...(certificate.result
        ? [
            `  result: ${certificate.result.branch} at ${certificate.result.head.slice(0, 12)} (from ${certificate.result.protectedBranch} at ${certificate.result.base.slice(0, 12)}); merge it with \`orchard team merge ${certificate.teamId}\``,
          ]
        : []),
      ...(certificate.verification
        ? [
            certificate.verification.verified
              ? `  verified: \`${oneLine(certificate.verification.command)}\` exited 0 in ${(certificate.verification.durationMs / 1000).toFixed(1)} s on ${certificate.verification.resultHead.slice(0, 12)} (tree ${certificate.verification.tree.slice(0, 12)}, ${certificate.verification.confined ? 'confined' : 'UNCONFINED'}, output ${certificate.verification.outputDigest.slice(0, 19)}…); re-run it with \`orchard team verify ${certificate.teamId}\``
              : `  not verified: ${certificate.verification.reason}`,
          ]
        : []),
      `  summary: ${oneLine(certificate.summary)}`,
    );
  } else if (v.certificate) {
    lines.push(`certificate ${v.certificate.certificateId} (tasks ${v.certificate.taskIds.join(', ')}; outputs ${v.certificate.outputIds.join(', ')})`);
  } else lines.push('certificate: none');
  if (v.summary) lines.push(`final summary (turn ${v.summary.turn}): ${oneLine(v.summary.text)}`);
  lines.push('', `Coordinator turns (${v.turns.length} most recent):`);
  if (v.turns.length === 0) lines.push('  none');
  else {
    lines.push(
      ...table(
        ['turn', 'revisions', 'outcome', 'model calls', 'tool calls', 'answer'],
        v.turns.map((t) => [String(t.turn), `${t.startRevision}→${t.endRevision}`, t.outcome, String(t.modelCalls), String(t.toolCalls), t.finalExcerpt ?? '']),
      ),
    );
  }
  lines.push('', `refusals (${v.refusals.length}):`);
  if (v.refusals.length === 0) lines.push('  none');
  else
    lines.push(
      ...table(
        ['tool', 'code'],
        v.refusals.map((r) => [r.tool, r.code]),
      ),
    );
  if (v.replies.length > 0) lines.push('', 'replies to the user:', ...v.replies.map((r) => `  ${oneLine(r)}`));
  return lines.join('\n');
}

const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();

/** Columns padded to their widest cell, indented two spaces; cells are cut to one line. */
function table(header: string[], rows: string[][]): string[] {
  const clean = (cell: string) => {
    const line = oneLine(cell);
    return line.length > 80 ? `${line.slice(0, 79)}…` : line;
  };
  const all = [header, ...rows.map((r) => r.map(clean))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => `  ${r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')}`);
}
