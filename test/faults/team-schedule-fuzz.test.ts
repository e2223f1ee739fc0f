import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import test from 'ava';
import fc from 'fast-check';
import { Client, Connection } from '@temporalio/client';
import type { ChildProcess } from 'node:child_process';
import { OrchardClient } from '../../client/client';
import { teamWorkflowId, type MessageResult, type ReceiptView, type TeamStatusView } from '../../contract/messages';
import { calls, final, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel, type ModelStub, type Reply } from '../helpers/model-stub';
import { makeRepo, testPool, testStackEnv, uniqueId } from '../helpers/orchard';
import { startToxiproxy, type CuttableProxy } from '../helpers/toxiproxy';
import { startSharedWorker } from './harness';
import { diagnose, failedWorkflowTasks, isOk, overlaps, poll, restore, retrying, retryArb, sleep, fuzzKnobs, type Outcome, type Retry } from './fuzz-kit';
import type { Pool } from 'pg';

/**
 * A randomized fault schedule for team runs (issue 18, deliverable 7): per case, a fresh task queue served by ONE whole
 * worker in a process of its own (workflows, store, model calls and confined commands), a fresh team of two Members on
 * one task, and a drawn schedule of:
 *
 * - `reassign`: the task in progress handed to the other Member (a handoff), with a request id; sometimes the client
 *   loses the answer and asks again, concurrently or after the first answer;
 * - `cancel`: the task in progress cancelled by the user (fenced and yielded like a reassign, no replacement);
 * - `resolve`: the newest receipt a person must settle (timeout, unknown, failed) released;
 * - `message`: a user message to the Coordinator (an update with a request id, retried the same ways);
 * - `cut`: PostgreSQL unreachable (behind Toxiproxy) for 0.5 s..ORCHARD_TEAM_FUZZ_MAX_CUT_MS;
 * - `kill`: the worker process killed with SIGKILL and a new one started for the same host (retried while the database
 *   is away, as a supervisor would);
 * - `wait`: a short pause.
 *
 * The Coordinator plans one task for the implementer and certifies once the board is ready; a Member answers every
 * brief with one command that writes `<mark> <phase> <ns>` lines to writes.log in its worktree for about 1.5 s, then
 * commits. After the schedule a person's part is played (receipts left for a user are released) and everything is
 * waited for; the checker asserts: no workflow failed and no workflow task failed; every request answered, its retries
 * with the same receipt or message id, one receipt per accepted request, none left requested or yielding; at most one
 * writer at any time across both worktrees (the task's lineage has one writer), no command started twice; every user
 * message answered by exactly one Coordinator turn; never `delivered` without a full closure (every task completed or
 * cancelled, every completed one with a commit) and one certificate.
 *
 * Knobs: ORCHARD_TEAM_FUZZ_SEED (replay), ORCHARD_TEAM_FUZZ_PATH, ORCHARD_TEAM_FUZZ_RUNS (cases: 6 by default, each 10
 * to 60 s: a kill leaves the dead worker's activities to their heartbeat timeouts), ORCHARD_TEAM_FUZZ_MAX_CUT_MS
 * (3000), ORCHARD_TEAM_FUZZ_CASE_MS (the bound on one case, 240 s).
 */
const { seed: SEED, runs: RUNS, maxCutMs: MAX_CUT_MS, path: PATH, caseMs: CASE_MS } = fuzzKnobs('ORCHARD_TEAM_FUZZ', { runs: 6, caseMs: 240_000 });

const embedded = testStackEnv().embedded;
const fuzzTest = embedded ? test.skip : test;
if (embedded) console.warn('team-schedule-fuzz: skipped on embedded PGlite (one shared backend session); CI runs it against PostgreSQL');

// ---------------------------------------------------------------------------------------------------------------
// The schedule

type Op =
  | { kind: 'reassign'; retry: Retry }
  | { kind: 'cancel'; retry: Retry }
  | { kind: 'resolve' }
  | { kind: 'message'; retry: Retry }
  | { kind: 'cut'; ms: number }
  | { kind: 'kill' }
  | { kind: 'wait'; ms: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('reassign' as const), retry: retryArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), retry: retryArb }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'resolve' as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('message' as const), retry: retryArb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cut' as const), ms: fc.integer({ min: 500, max: MAX_CUT_MS }) }) },
  { weight: 2, arbitrary: fc.constant({ kind: 'kill' as const }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 1500 }) }) },
);
const scheduleArb = fc.array(opArb, { minLength: 2, maxLength: 7 });

const describeOp = (op: Op): string => {
  if ('retry' in op) return op.retry === 'none' ? op.kind : `${op.kind}(${op.retry})`;
  if ('ms' in op) return `${op.kind}(${op.ms})`;
  return op.kind;
};

// ---------------------------------------------------------------------------------------------------------------
// The model and the stack shared by every case

const MEMBERS = ['implementer', 'reviewer'];
const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const toolResultsSinceUser = (body: any) => {
  const messages: any[] = body.messages;
  return messages.slice(messages.map((m) => m.role).lastIndexOf('user') + 1).filter((m) => m.role === 'tool').length;
};

let marks = 0;
function model(body: any): Reply {
  if (isCoordinator(body)) {
    if (toolResultsSinceUser(body) > 0) return final('Done.');
    const text = lastUserText(body);
    if (text.startsWith('Build')) {
      return calls(['task_create', { taskId: 'work', title: 'Work', description: 'Write and commit the work.', owner: 'implementer' }], ['plan_approve', {}]);
    }
    if (text.includes('completion_candidate.state is ready')) return calls(['org_run_complete', { summary: 'The work is committed.' }]);
    return final('Noted.');
  }
  if (toolResultsSinceUser(body) > 0) return completion({ content: 'done' });
  const mark = `m${process.pid}-${++marks}`;
  const line = (phase: string) => `echo "${mark} ${phase} $(date +%s%N)" >> writes.log`;
  const command = [
    line('start'),
    `for i in $(seq 1 30); do sleep 0.05; ${line('tick')}; done`,
    `echo ${mark} > work.txt && git add work.txt && git commit -qm ${mark}`,
    line('end'),
  ].join('; ');
  return calls(['bash', { command }]);
}

interface Stack {
  temporal: Client;
  pool: Pool;
  pg: CuttableProxy & { url: string };
  stub: ModelStub;
}
let stack: Stack | undefined;
const teardowns: (() => unknown)[] = [];
const kit = { teardown: (fn: () => unknown) => void teardowns.push(fn) };

test.before(async () => {
  if (embedded) return;
  const toxiproxy = await startToxiproxy();
  kit.teardown(() => toxiproxy.stop());
  const pg = await toxiproxy.proxyDatabase(testStackEnv().databaseUrl);
  const stub = await stubModel(kit, model);
  const pool = await testPool(kit);
  const connection = await Connection.connect({ address: testStackEnv().temporalAddress });
  kit.teardown(() => connection.close());
  stack = { temporal: new Client({ connection, namespace: testStackEnv().namespace }), pool, pg, stub };
});
test.after.always(async () => {
  for (const fn of teardowns.reverse()) await fn();
});

// ---------------------------------------------------------------------------------------------------------------
// One case

interface Case {
  teamId: string;
  taskQueue: string;
  hostId: string;
  worktreeRoot: string;
  client: OrchardClient;
  worker?: ChildProcess;
  /** Reassigns and cancels by request id: every call's outcome. */
  handoffs: Map<string, { kind: 'reassign' | 'cancel'; outcomes: Outcome<ReceiptView | { receipt?: ReceiptView }>[] }>;
  resolves: Map<string, Outcome<ReceiptView>[]>;
  messages: Map<string, Outcome<MessageResult>[]>;
  kills: number;
}

/** A whole worker for the case's queue, in a process of its own; while the database is away its start fails: retried. */
async function startWorker(s: Stack, c: Case, deadline: number): Promise<void> {
  for (;;) {
    try {
      c.worker = await startSharedWorker(kit as never, {
        taskQueue: c.taskQueue,
        hostId: c.hostId,
        worktreeRoot: c.worktreeRoot,
        modelUrl: s.stub.url,
        env: { DATABASE_URL: s.pg.url, ORCHARD_TEST_CONFINED: '1' },
      });
      return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`the worker did not start again in time: ${String(err).slice(0, 300)}`);
      await sleep(500);
    }
  }
}

function killWorker(c: Case): void {
  const pid = c.worker?.pid;
  if (!pid) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
  c.worker = undefined;
}

/** The task a person would act on now: the one in progress (read from the board). */
async function taskInProgress(s: Stack, teamId: string): Promise<string | undefined> {
  const { rows } = await s.pool.query(`SELECT task_id FROM team_tasks WHERE team_id = $1 AND status = 'in_progress' ORDER BY created_at DESC LIMIT 1`, [
    teamId,
  ]);
  return rows[0]?.task_id;
}

async function execute(s: Stack, c: Case, ops: Op[], deadline: number): Promise<void> {
  const pending: Promise<unknown>[] = [];
  let cutting: Promise<void> = Promise.resolve();
  const withRetry = retrying(pending, deadline);
  try {
    for (const [i, op] of ops.entries()) {
      switch (op.kind) {
        case 'reassign':
        case 'cancel': {
          const taskId = await taskInProgress(s, c.teamId);
          if (!taskId) break;
          const requestId = `${c.teamId}-${op.kind}-${i}`;
          const outcomes: Outcome<ReceiptView | { receipt?: ReceiptView }>[] = [];
          c.handoffs.set(requestId, { kind: op.kind, outcomes });
          const owner = (await s.pool.query(`SELECT owner FROM team_tasks WHERE team_id = $1 AND task_id = $2`, [c.teamId, taskId])).rows[0]?.owner;
          const newOwner = MEMBERS.find((m) => m !== owner)!;
          withRetry(op.retry, outcomes, () =>
            op.kind === 'reassign'
              ? c.client.reassignTask(c.teamId, { taskId, newOwner, reason: `schedule op ${i}`, requestId })
              : c.client.cancelTask(c.teamId, { taskId, reason: `schedule op ${i}`, requestId }),
          );
          break;
        }
        case 'resolve': {
          const status = await c.client.teamStatus(c.teamId).catch(() => undefined);
          const receipt = status?.receipts.filter((r) => ['timeout', 'unknown', 'failed'].includes(r.state)).at(-1);
          if (!receipt) break;
          const requestId = `${c.teamId}-resolve-${i}`;
          const outcomes: Outcome<ReceiptView>[] = [];
          c.resolves.set(requestId, outcomes);
          withRetry('none', outcomes, () =>
            c.client.resolveHandoff(c.teamId, { receiptId: receipt.receiptId, action: 'release', reason: 'checked', requestId }),
          );
          break;
        }
        case 'message': {
          const requestId = `${c.teamId}-message-${i}`;
          const outcomes: Outcome<MessageResult>[] = [];
          c.messages.set(requestId, outcomes);
          withRetry(op.retry, outcomes, () => c.client.teamMessage(c.teamId, { text: `note ${i} (${requestId})`, requestId }));
          break;
        }
        case 'cut':
          await cutting;
          await s.pg.cut();
          cutting = sleep(op.ms).then(() => restore(s.pg));
          break;
        case 'kill':
          killWorker(c);
          c.kills += 1;
          await startWorker(s, c, deadline);
          break;
        case 'wait':
          await sleep(op.ms);
          break;
      }
    }
  } finally {
    await cutting;
  }
  await Promise.all(pending);
}

/**
 * After the schedule: a person releases what waits for one (with its proof: the release is refused until the old
 * runtime is quiescent, so it is retried), and the run settles: delivered, or nothing left to do.
 */
async function quiesce(s: Stack, c: Case, deadline: number): Promise<TeamStatusView | undefined> {
  let released = 0;
  // Quiet twice in a row, at the same work revision: the board in PostgreSQL is ahead of the run while a settle's
  // answer is on its way to the workflow.
  let lastQuiet: number | undefined;
  return poll(async () => {
    const v = await quiet();
    if (!v) return (lastQuiet = undefined);
    if (v.status === 'delivered' || lastQuiet === v.workRevision) return v;
    lastQuiet = v.workRevision;
    await sleep(1000);
    return undefined;
  }, deadline);

  async function quiet(): Promise<TeamStatusView | undefined> {
    const v = await c.client.teamStatus(c.teamId).catch(() => undefined);
    if (!v) return undefined;
    const waiting = v.receipts.find((r) => ['timeout', 'unknown'].includes(r.state));
    if (waiting) {
      await c.client
        .resolveHandoff(c.teamId, {
          receiptId: waiting.receiptId,
          action: 'release',
          reason: 'after the schedule',
          requestId: `${c.teamId}-quiesce-${released++}`,
        })
        .catch(() => undefined);
      return undefined;
    }
    if (v.receipts.some((r) => ['requested', 'yielding'].includes(r.state))) return undefined;
    if (v.status === 'delivered') return v;
    const { rows } = await s.pool.query(`SELECT status FROM team_tasks WHERE team_id = $1`, [c.teamId]);
    const open = rows.some((r) => ['pending', 'in_progress'].includes(r.status));
    const running = v.executions.some((e) => e.state === 'running');
    if (open || running || v.candidate === 'ready' || v.status === 'coordinating' || v.queuedMessages > 0) return undefined;
    return v;
  }
}

async function check(s: Stack, c: Case, quiet: TeamStatusView | undefined, problems: string[], notes: string[]): Promise<void> {
  const workflowId = teamWorkflowId(c.teamId);
  if (!quiet)
    problems.push(
      `the team did not settle in time: ${await diagnose(s.temporal, workflowId).catch((e) => String(e))}; status ${JSON.stringify(await c.client.teamStatus(c.teamId).catch(() => 'unavailable')).slice(0, 1500)}`,
    );
  const v = await c.client.teamStatus(c.teamId);

  // (1) Requests: answered; retries with the same receipt; a typed refusal only when no attempt was accepted.
  const accepted = new Set<string>();
  const receiptOf = (o: ReceiptView | { receipt?: ReceiptView }) => ('receiptId' in o ? o.receiptId : o.receipt?.receiptId) ?? 'none';
  for (const [requestId, { kind, outcomes }] of c.handoffs) {
    for (const o of outcomes) if ('lost' in o) problems.push(`${kind} ${requestId}: no answer in time (${o.errors.slice(-1)})`);
    const ok = outcomes.filter(isOk);
    const ids = [...new Set(ok.map((o) => receiptOf(o.ok)))];
    if (ids.length > 1) problems.push(`${kind} ${requestId}: answered with different receipts ${ids.join(', ')}`);
    if (ok.length > 0 && ok.length < outcomes.length) {
      problems.push(`${kind} ${requestId}: accepted, and a retry refused: ${outcomes.map((o) => ('refused' in o ? o.refused : 'ok')).join(', ')}`);
    }
    if (ok.length > 0 && ids[0] !== 'none') accepted.add(ids[0]);
  }
  for (const [requestId, outcomes] of c.resolves) for (const o of outcomes) if ('lost' in o) problems.push(`resolve ${requestId}: no answer in time`);
  const messageIds = new Map<string, string>();
  for (const [requestId, outcomes] of c.messages) {
    for (const o of outcomes) {
      if ('lost' in o) problems.push(`message ${requestId}: no answer in time (${o.errors.slice(-1)})`);
      if ('refused' in o) problems.push(`message ${requestId} refused: ${o.refused}`);
    }
    const ids = [...new Set(outcomes.filter(isOk).map((o) => o.ok.messageId))];
    if (ids.length > 1) problems.push(`message ${requestId}: answered with different ids ${ids.join(', ')}`);
    if (ids.length === 1) messageIds.set(requestId, ids[0]);
  }

  // (2) Receipts: one per accepted request, none left unsettled.
  const receipts = await s.pool.query(`SELECT receipt_id, state FROM team_handoff_receipts WHERE team_id = $1`, [c.teamId]);
  for (const r of receipts.rows) if (['requested', 'yielding'].includes(r.state)) problems.push(`receipt ${r.receipt_id} left ${r.state}`);
  for (const id of accepted) if (!receipts.rows.some((r) => r.receipt_id === id)) problems.push(`receipt ${id} answered but not stored`);
  if (receipts.rowCount !== accepted.size) problems.push(`${receipts.rowCount} receipts stored for ${accepted.size} accepted requests`);

  // (3) One writer at a time across the Members' worktrees; no command twice.
  const lines = existsSync(c.worktreeRoot)
    ? readdirSync(c.worktreeRoot).flatMap((dir) => {
        const log = join(c.worktreeRoot, dir, 'writes.log');
        return existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').filter(Boolean) : [];
      })
    : [];
  const writes = overlaps(lines);
  problems.push(...writes.problems);

  // (4) Messages: each answered by exactly one Coordinator turn.
  const { rows: turnRows } = await s.pool.query<{ task_id: string; turns: number }>(
    `SELECT task_id, count(DISTINCT turn_id)::int AS turns FROM transcript_entries
     WHERE session_id = $1 AND role = 'user' AND step = 0 AND ordinal = 0 GROUP BY task_id`,
    [c.teamId],
  );
  for (const [requestId, messageId] of messageIds) {
    const n = turnRows.find((r) => r.task_id === messageId)?.turns ?? 0;
    if (n !== 1) problems.push(`message ${requestId} (${messageId}) answered by ${n} turns`);
  }

  // (5) Delivered only with a full closure, and one certificate.
  const { rows: tasks } = await s.pool.query(
    `SELECT t.task_id, t.status, o.commit_sha FROM team_tasks t LEFT JOIN team_task_outputs o ON o.output_id = t.output_id WHERE t.team_id = $1`,
    [c.teamId],
  );
  for (const task of tasks) if (task.status === 'failed') problems.push(`task ${task.task_id} failed`);
  const certificates = await s.pool.query(`SELECT generation FROM team_certificates WHERE team_id = $1`, [c.teamId]);
  if (v.status === 'delivered' || certificates.rowCount! > 0) {
    if (certificates.rowCount !== 1) problems.push(`${certificates.rowCount} certificates`);
    for (const task of tasks) {
      if (!['completed', 'cancelled'].includes(task.status)) problems.push(`delivered with task ${task.task_id} ${task.status}`);
      if (task.status === 'completed' && !task.commit_sha) problems.push(`delivered with task ${task.task_id} completed without a commit`);
    }
    if (!tasks.some((t) => t.status === 'completed')) problems.push('delivered with no completed task');
  }

  // (6) Nothing failed: the team runs, its executions and Members' sessions are not failed or terminated, no workflow task failed.
  const described = await s.temporal.workflow.getHandle(workflowId).describe();
  if (described.status.name !== 'RUNNING') problems.push(`team is ${described.status.name}`);
  for (const f of await failedWorkflowTasks(s.temporal, workflowId)) problems.push(`team workflow task failed: ${f}`);
  for (const e of v.executions) {
    if (!e.workflowId) continue;
    const status = (await s.temporal.workflow.getHandle(e.workflowId).describe()).status.name;
    if (['FAILED', 'TERMINATED', 'TIMED_OUT'].includes(status)) problems.push(`execution ${e.workflowId} ${status}`);
  }
  notes.push(
    `${v.status}; tasks ${tasks.map((t) => `${t.task_id}:${t.status}`).join(',')}; receipts ${v.receipts.map((r) => r.state).join(',') || '-'}; ` +
      `${writes.commands} commands; ${c.kills} kill(s)`,
  );
}

let cases = 0;

async function runCase(s: Stack, ops: Op[]): Promise<void> {
  const started = Date.now();
  const deadline = started + CASE_MS;
  const suffix = randomUUID().slice(0, 8);
  const c: Case = {
    teamId: uniqueId('tfuzz'),
    taskQueue: `tfuzz-${suffix}`,
    hostId: `host-${suffix}`,
    worktreeRoot: mkdtempSync(join(tmpdir(), 'orchard-tfuzz-')),
    client: undefined as never,
    handoffs: new Map(),
    resolves: new Map(),
    messages: new Map(),
    kills: 0,
  };
  c.client = new OrchardClient(s.temporal, { taskQueue: c.taskQueue, defaultHost: c.hostId });
  const problems: string[] = [];
  const notes: string[] = [];
  try {
    await startWorker(s, c, deadline);
    await c.client.startTeam({
      teamId: c.teamId,
      repo: makeRepo(),
      goal: 'Build the work',
      members: MEMBERS.map((memberId) => ({ memberId, role: memberId })),
    });
    // The schedule starts once the Member writes (a handoff has something to fence).
    await poll(async () => ((await taskInProgress(s, c.teamId)) ? true : undefined), deadline);
    await execute(s, c, ops, deadline);
    await check(s, c, await quiesce(s, c, deadline), problems, notes);
  } catch (err) {
    problems.push(`the case threw: ${(err as Error).stack ?? String(err)}`);
  } finally {
    await restore(s.pg).catch(() => undefined);
    killWorker(c);
    if (problems.length === 0)
      await s.temporal.workflow
        .getHandle(teamWorkflowId(c.teamId))
        .terminate('team-schedule-fuzz case over')
        .catch(() => undefined);
  }
  cases += 1;
  s.stub.requests.length = 0;
  console.log(`team-schedule-fuzz case ${cases}: ${ops.map(describeOp).join(' ')} — ${((Date.now() - started) / 1000).toFixed(1)} s; ${notes.join('; ')}`);
  if (problems.length > 0) {
    throw new Error(
      [`team-schedule-fuzz: ${problems.length} problem(s) (team ${c.teamId}, queue ${c.taskQueue}):`, ...problems.map((p) => `  - ${p}`)].join('\n'),
    );
  }
}

fuzzTest(
  'a randomized schedule of reassigns, cancels, resolves, messages, PostgreSQL cuts and worker kills (SIGKILL) keeps one writer, settles every receipt, loses and doubles nothing',
  async (t) => {
    t.timeout(RUNS * CASE_MS + 120_000);
    const s = stack!;
    console.log(`team-schedule-fuzz: seed ${SEED}, ${RUNS} case(s), cuts up to ${MAX_CUT_MS} ms`);
    const started = Date.now();
    try {
      await fc.assert(
        fc.asyncProperty(scheduleArb, (ops) => runCase(s, ops)),
        { seed: SEED, numRuns: RUNS, path: PATH, verbose: 1, endOnFailure: true, includeErrorInReport: true },
      );
    } catch (err) {
      const message = (err as Error).message;
      const failedPath = /path: "([^"]+)"/.exec(message)?.[1];
      const again = `ORCHARD_TEAM_FUZZ_SEED=${SEED}${failedPath ? ` ORCHARD_TEAM_FUZZ_PATH=${failedPath} ORCHARD_TEAM_FUZZ_RUNS=1` : ` ORCHARD_TEAM_FUZZ_RUNS=${RUNS}`}`;
      t.fail(`${message}\nreplay the failing case: ${again} npm test -- test/faults/team-schedule-fuzz.test.ts`);
    }
    t.log(`${cases} case(s) in ${((Date.now() - started) / 1000).toFixed(0)} s (seed ${SEED})`);
    t.pass();
  },
);
