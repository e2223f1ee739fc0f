import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import fc from 'fast-check';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { messageSignal, orchestratorWorkflowId, sessionWorkflowId, type MessageResult, type SendResult } from '../../contract/messages';
import { final, isOrchestratorRequest, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel, type ModelStub, type Reply } from '../helpers/model-stub';
import { makeRepo, startOrchard, testStackEnv, uniqueId, type TestOrchard } from '../helpers/orchard';
import { startToxiproxy, type CuttableProxy } from '../helpers/toxiproxy';
import {
  answered,
  diagnose,
  failedWorkflowTasks,
  isOk,
  overlaps,
  poll,
  restore,
  retrying,
  retryArb,
  sleep,
  fuzzKnobs,
  type Outcome,
  type Retry,
} from './fuzz-kit';

/**
 * A randomized fault schedule (issue 18, deliverable 7). Per case, fast-check draws a schedule of operations against
 * ONE fresh orchestrator and ONE fresh session, all on one stack (workers, Toxiproxy in front of PostgreSQL, an HTTP
 * model stub) shared by the whole file:
 *
 * - `message`: an orchestrator message as an update with a request id; sometimes the client loses the response and
 *   calls again with the same id, concurrently or after the first answer;
 * - `signal`: an orchestrator message as a signal, with or without a request id, sometimes signalled twice;
 * - `send`: a session task as an update with a request id, with the same kinds of retry; the session's model answers
 *   every task with one bash command that appends `<mark> <phase> <date +%s%N>` lines to writes.log in its worktree;
 * - `cut`: PostgreSQL unreachable for 0.5 s..ORCHARD_FUZZ_MAX_CUT_MS (the ops after it run during the cut);
 * - `restart`: every worker stopped and started again (a worker kill; a start during a cut is retried until the
 *   database answers, as a supervisor would);
 * - `wait`: a short pause; and sometimes a session `cancel` near the end.
 *
 * After the schedule, everything is waited for (every call answered, both workflows quiet, bounded) and a checker
 * asserts only what must hold: every accepted message and task answered by exactly one turn (counted in PostgreSQL:
 * `session_tasks` and the turns' user rows in `transcript_entries`), or, in a session the schedule cancelled, its
 * stored row ended `cancelled` after at most one turn; retries answered with the first id, nothing stored twice,
 * answered twice or lost; no workflow failed and no workflow task failed; no signal refused (retries are unbounded);
 * the session's worktree had one lease holder at one generation and no two commands ever wrote at once (nor any
 * command twice).
 *
 * Knobs: ORCHARD_FUZZ_SEED (replay), ORCHARD_FUZZ_PATH (with the seed: replay only the failing case fast-check
 * printed, with ORCHARD_FUZZ_RUNS=1), ORCHARD_FUZZ_RUNS (cases: 20 by default, one to three minutes on a loaded 2-core
 * machine (50 took four), a case taking 0.5 to 11 s, 31 s when a restart leaves an activity to its heartbeat timeout; thousands on a
 * quiet machine, with ORCHARD_TEST_DEADLINE_MINUTES raised to match), ORCHARD_FUZZ_MAX_CUT_MS (longest cut, 3000 by
 * default), ORCHARD_FUZZ_SHRINK=1 (shrink a failure: slow, every case takes seconds), ORCHARD_FUZZ_CASE_MS (the bound
 * on one case's calls and wait for quiescence, 150 s). A replay runs the same schedule; how it interleaves with the
 * workers is the machine's, so a race may take a few replays.
 */
const { seed: SEED, runs: RUNS, maxCutMs: MAX_CUT_MS, path: PATH, caseMs: CASE_MS } = fuzzKnobs('ORCHARD_FUZZ', { runs: 20, caseMs: 150_000 });
const SHRINK = process.env.ORCHARD_FUZZ_SHRINK === '1';

const embedded = testStackEnv().embedded;
const fuzzTest = embedded ? test.skip : test;
if (embedded) console.warn('schedule-fuzz: skipped on embedded PGlite (one shared backend session); CI runs it against PostgreSQL');

// ---------------------------------------------------------------------------------------------------------------
// The schedule

type Op =
  | { kind: 'message'; retry: Retry }
  | { kind: 'signal'; mode: 'plain' | 'keyed' | 'keyed-twice' }
  | { kind: 'send'; retry: Retry }
  | { kind: 'cut'; ms: number }
  | { kind: 'restart' }
  | { kind: 'wait'; ms: number }
  | { kind: 'cancel' };

interface Schedule {
  ops: Op[];
}

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('message' as const), retry: retryArb }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('signal' as const), mode: fc.constantFrom('plain' as const, 'keyed' as const, 'keyed-twice' as const) }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('send' as const), retry: retryArb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cut' as const), ms: fc.integer({ min: 500, max: MAX_CUT_MS }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'restart' as const }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 800 }) }) },
);
/** Operations, then, in about one case in three, a session cancel among the last two. */
const cancelFromEndArb = fc.oneof({ weight: 2, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 }) });
const scheduleArb: fc.Arbitrary<Schedule> = fc
  .record({ ops: fc.array(opArb, { minLength: 2, maxLength: 8 }), cancelFromEnd: cancelFromEndArb })
  .map(({ ops, cancelFromEnd }) => {
    if (cancelFromEnd === null) return { ops };
    const at = Math.max(0, ops.length - cancelFromEnd);
    return { ops: [...ops.slice(0, at), { kind: 'cancel' as const }, ...ops.slice(at)] };
  });

const describeOp = (op: Op): string => {
  switch (op.kind) {
    case 'message':
    case 'send':
      return op.retry === 'none' ? op.kind : `${op.kind}(${op.retry})`;
    case 'signal':
      return `signal(${op.mode})`;
    case 'cut':
    case 'wait':
      return `${op.kind}(${op.ms})`;
    default:
      return op.kind;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The stack, shared by every case

/**
 * The model: an orchestrator request is answered with a plain echo (one model call, no tool); a session's task is
 * answered with one bash writer (its mark is unique per reply, so a command that ran twice shows), then, once the
 * model has seen the command's result, with a final answer.
 */
let marks = 0;
function model(body: any): Reply {
  if (isOrchestratorRequest(body)) return final(`answered: ${lastUserText(body).slice(0, 80)}`);
  const messages: any[] = body.messages;
  const lastUser = messages.map((m) => m.role).lastIndexOf('user');
  if (messages.slice(lastUser + 1).some((m) => m.role === 'tool')) return final('written');
  const mark = `w${process.pid}-${++marks}`;
  const line = (phase: string) => `echo "${mark} ${phase} $(date +%s%N)" >> writes.log`;
  const command = [line('start'), `for i in 1 2 3; do sleep 0.1; ${line('tick')}; done`, line('end')].join('; ');
  return completion(
    { tool_calls: [{ id: `call_${mark}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command }) } }] },
    'tool_calls',
  );
}

interface Stack {
  orchard: TestOrchard;
  pg: CuttableProxy;
  repo: string;
  stub: ModelStub;
}
let stack: Stack | undefined;
const teardowns: (() => unknown)[] = [];

test.before(async () => {
  const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) };
  if (embedded) return;
  const toxiproxy = await startToxiproxy();
  t.teardown(() => toxiproxy.stop());
  const pg = await toxiproxy.proxyDatabase(testStackEnv().databaseUrl);
  const stub = await stubModel(t, model);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  const orchard = await startOrchard(t, { defaultProvider: provider, databaseUrl: pg.url });
  stack = { orchard, pg, repo: makeRepo(), stub };
});
test.after.always(async () => {
  // Last registered first: the workers stop before their database proxy goes.
  for (const fn of teardowns.reverse()) await fn();
});

// ---------------------------------------------------------------------------------------------------------------
// Executing a schedule

interface Run {
  orchestratorId: string;
  sessionId: string;
  /** Orchestrator messages sent as updates, by request id: every call's outcome. */
  updates: Map<string, Outcome<MessageResult>[]>;
  /** Orchestrator messages sent as signals: text, request id (if any), how often signalled and the outcomes. */
  signals: { text: string; requestId?: string; outcomes: Outcome<void>[] }[];
  /** Session sends by request id: every call's outcome. */
  sends: Map<string, Outcome<SendResult>[]>;
  cancel?: Outcome<unknown>;
  cancelled: boolean;
}

async function execute(s: Stack, schedule: Schedule, run: Run, deadline: number): Promise<void> {
  const { orchard, pg } = s;
  const pending: Promise<unknown>[] = [];
  let cutting: Promise<void> = Promise.resolve();
  const orchestrator = orchard.temporal.workflow.getHandle(orchestratorWorkflowId(run.orchestratorId));

  const withRetry = retrying(pending, deadline);

  try {
    for (const [i, op] of schedule.ops.entries()) {
      switch (op.kind) {
        case 'message': {
          const requestId = `${run.orchestratorId}-u${i}`;
          const text = `message ${i} (${requestId})`;
          const outcomes: Outcome<MessageResult>[] = [];
          run.updates.set(requestId, outcomes);
          withRetry(op.retry, outcomes, () => orchard.client.message(run.orchestratorId, { text, requestId }));
          break;
        }
        case 'signal': {
          const requestId = op.mode === 'plain' ? undefined : `${run.orchestratorId}-s${i}`;
          const text = `signal ${i} (${requestId ?? 'no request id'})`;
          const entry = { text, requestId, outcomes: [] as Outcome<void>[] };
          run.signals.push(entry);
          const signal = () => answered(() => orchestrator.signal(messageSignal, requestId ? { text, requestId } : { text }), deadline);
          entry.outcomes.push(await signal());
          if (op.mode === 'keyed-twice') entry.outcomes.push(await signal());
          break;
        }
        case 'send': {
          const requestId = `${run.sessionId}-t${i}`;
          const outcomes: Outcome<SendResult>[] = [];
          run.sends.set(requestId, outcomes);
          withRetry(op.retry, outcomes, () => orchard.client.send(run.sessionId, { task: `task ${i} (${requestId})`, requestId }));
          break;
        }
        case 'cancel': {
          run.cancelled = true;
          pending.push(answered(() => orchard.client.cancel(run.sessionId, 'the schedule cancels it'), deadline).then((o) => void (run.cancel = o)));
          break;
        }
        case 'cut': {
          // One cut at a time; the ops after this one run while the database is away.
          await cutting;
          await pg.cut();
          cutting = sleep(op.ms).then(() => restore(pg));
          break;
        }
        case 'restart':
          await restartWorkers(orchard);
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
 * Stops every worker and starts them again. A worker's start-up sweep reads PostgreSQL: during a cut the start fails
 * (a real worker exits with database_unavailable), and is retried until the database answers, as a supervisor would.
 */
async function restartWorkers(orchard: TestOrchard): Promise<void> {
  try {
    await orchard.restartWorkers();
  } catch {
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        await orchard.startHost(orchard.hostId);
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`the workers did not start again within 60 s: ${String(err)}`);
        await sleep(500);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Quiescence and the checker

interface TaskRow {
  task_id: string;
  request_id: string | null;
  task: string;
  state: string;
  outcome: string | null;
}

async function taskRows(orchard: TestOrchard, sessionId: string): Promise<TaskRow[]> {
  const { rows } = await orchard.pool.query<TaskRow>(
    `SELECT task_id, request_id, task, state, outcome FROM session_tasks WHERE session_id = $1 ORDER BY created_at, task_id`,
    [sessionId],
  );
  return rows;
}

/** Turns (distinct turn ids) that opened with each task's user message: the exact count of answers per task. */
async function turnsPerTask(orchard: TestOrchard, sessionId: string): Promise<Map<string, number>> {
  const { rows } = await orchard.pool.query<{ task_id: string | null; turns: number }>(
    `SELECT task_id, count(DISTINCT turn_id)::int AS turns FROM transcript_entries
     WHERE session_id = $1 AND role = 'user' AND step = 0 AND ordinal = 0 GROUP BY task_id`,
    [sessionId],
  );
  return new Map(rows.map((r) => [r.task_id ?? '(none)', r.turns]));
}

interface Check {
  problems: string[];
  notes: string[];
}

async function checkOrchestrator(orchard: TestOrchard, run: Run, deadline: number, check: Check): Promise<void> {
  const { problems } = check;
  const id = run.orchestratorId;
  // (1) Every update answered with one message id, retries with the same; exactly one first answer per request id.
  const accepted = new Map<string, string>();
  for (const [requestId, outcomes] of run.updates) {
    const refused = outcomes.filter((o) => 'refused' in o);
    if (refused.length > 0) problems.push(`message ${requestId} refused: ${refused.map((o) => (o as { refused: string }).refused).join(', ')}`);
    const lost = outcomes.filter((o) => 'lost' in o);
    if (lost.length > 0) problems.push(`message ${requestId}: no answer in time (${lost.flatMap((o) => o.errors).slice(-1)})`);
    const ok = outcomes.filter(isOk);
    const ids = [...new Set(ok.map((o) => o.ok.messageId))];
    if (ids.length > 1) problems.push(`message ${requestId}: retries answered with different ids ${ids.join(', ')}`);
    const firsts = ok.filter((o) => !o.ok.duplicate).length;
    const clean = outcomes.every((o) => o.errors.length === 0) && ok.length === outcomes.length;
    if (firsts > 1 || (clean && firsts !== 1)) problems.push(`message ${requestId}: ${firsts} answers not marked duplicate among ${ok.length}`);
    if (ids.length >= 1) accepted.set(requestId, ids[0]);
  }
  const signalled = run.signals.filter((s) => s.outcomes.every(isOk));
  for (const s of run.signals) if (!s.outcomes.every(isOk)) problems.push(`signal "${s.text}" not delivered to Temporal: ${JSON.stringify(s.outcomes)}`);
  const expected = accepted.size + signalled.length;

  // Quiet: every expected message stored and answered, nothing queued or running.
  const quiet = await poll(async () => {
    const [status, rows] = await Promise.all([orchard.client.orchestratorStatus(id), taskRows(orchard, id)]);
    return status.status === 'idle' && status.queued === 0 && rows.length >= expected && status.turnsCompleted === rows.length ? status : undefined;
  }, deadline);
  const status = await orchard.client.orchestratorStatus(id);
  if (!quiet) {
    problems.push(`orchestrator not quiet in time: ${status.status}, ${status.queued} queued, ${status.turnsCompleted} turns, ${expected} messages expected`);
    problems.push(`  ${await diagnose(orchard.temporal, orchestratorWorkflowId(id))}`);
  }

  const rows = await taskRows(orchard, id);
  const turns = await turnsPerTask(orchard, id);
  for (const [requestId, messageId] of accepted) {
    const stored = rows.filter((r) => r.request_id === requestId);
    if (stored.length !== 1 || stored[0].task_id !== messageId) {
      problems.push(`message ${requestId} (answered ${messageId}) stored as ${JSON.stringify(stored.map((r) => r.task_id))}`);
    }
  }
  for (const s of signalled) {
    const stored = rows.filter((r) => (s.requestId ? r.request_id === s.requestId : r.task === s.text));
    if (stored.length !== 1) problems.push(`signal "${s.text}" (${s.outcomes.length} time(s)) stored ${stored.length} time(s)`);
  }
  if (rows.length !== expected) problems.push(`orchestrator stored ${rows.length} messages (${rows.map((r) => r.task_id).join(', ')}), ${expected} expected`);
  // Each stored message answered by exactly one turn.
  for (const r of rows) {
    const n = turns.get(r.task_id) ?? 0;
    if (n !== 1) problems.push(`orchestrator message ${r.task_id} (${r.request_id ?? r.task}) answered by ${n} turns`);
  }
  for (const taskId of turns.keys()) if (!rows.some((r) => r.task_id === taskId)) problems.push(`orchestrator turn for unknown message ${taskId}`);
  if (status.turnsCompleted !== rows.length) problems.push(`orchestrator completed ${status.turnsCompleted} turns for ${rows.length} messages`);
  for (const turn of status.turns)
    if (turn.outcome !== 'finished') problems.push(`orchestrator turn ${turn.turn} (${turn.taskId}) ${turn.outcome}: ${JSON.stringify(turn.error)}`);
  // (3) With unbounded retries no signal is refused.
  if (status.refusedSignals) problems.push(`orchestrator refused ${status.refusedSignals} signal(s)`);
  // (2) Still running, no workflow task failed.
  const described = await orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id)).describe();
  if (described.status.name !== 'RUNNING') problems.push(`orchestrator is ${described.status.name}`);
  for (const f of await failedWorkflowTasks(orchard.temporal, orchestratorWorkflowId(id))) problems.push(`orchestrator workflow task failed: ${f}`);
  check.notes.push(`orchestrator: ${rows.length} messages, ${status.turnsCompleted} turns`);
}

async function checkSession(orchard: TestOrchard, run: Run, deadline: number, check: Check): Promise<void> {
  const { problems } = check;
  const id = run.sessionId;
  const refusable = new Set(['session_closing', 'session_closed']);
  // (1) Every send answered with one task id, retries with the same; refusals only once a cancel was asked for.
  const accepted = new Map<string, string>();
  const uncertain = new Set<string>();
  for (const [requestId, outcomes] of run.sends) {
    for (const o of outcomes) {
      if ('refused' in o && !(run.cancelled && refusable.has(o.refused))) problems.push(`send ${requestId} refused: ${o.refused}`);
      if ('lost' in o) problems.push(`send ${requestId}: no answer in time (${o.errors.slice(-1)})`);
    }
    const ids = [...new Set(outcomes.filter(isOk).map((o) => o.ok.taskId))];
    if (ids.length > 1) problems.push(`send ${requestId}: retries answered with different task ids ${ids.join(', ')}`);
    if (ids.length >= 1) accepted.set(requestId, ids[0]);
    // Refused after an attempt whose answer was lost: that attempt may have queued it.
    else if (outcomes.some((o) => o.errors.length > 0)) uncertain.add(requestId);
  }
  if (run.cancel && !isOk(run.cancel) && !('refused' in run.cancel && run.cancel.refused === 'session_closed')) {
    problems.push(`cancel not answered: ${JSON.stringify(run.cancel)}`);
  }

  const workflowId = sessionWorkflowId(id);
  const closed = async () => (await orchard.temporal.workflow.getHandle(workflowId).describe()).status.name !== 'RUNNING';
  const quiet = await poll(async () => {
    const [view, rows] = await Promise.all([orchard.client.status(id), taskRows(orchard, id)]);
    const settled = view.status !== 'progressing' && view.queued === 0 && !view.currentTask;
    if (!settled || rows.length < accepted.size) return undefined;
    // A cancelled session closes (its workflow completes): after that nothing changes its rows, so they are checked as
    // they are. A running one is quiet once every stored task has ended.
    if (view.status === 'closed') return (await closed()) ? view : undefined;
    return rows.every((r) => ['done', 'failed', 'cancelled'].includes(r.state)) ? view : undefined;
  }, deadline);
  const view = await orchard.client.status(id);
  if (!quiet) {
    problems.push(
      `session not quiet in time: ${view.status}, ${view.queued} queued, current ${JSON.stringify(view.currentTask)}, worktree ${view.worktree ?? 'none'}`,
    );
    problems.push(`  ${await diagnose(orchard.temporal, sessionWorkflowId(id))}`);
  }

  const rows = await taskRows(orchard, id);
  const turns = await turnsPerTask(orchard, id);
  for (const [requestId, taskId] of accepted) {
    const stored = rows.filter((r) => r.request_id === requestId);
    if (stored.length !== 1 || stored[0].task_id !== taskId)
      problems.push(`send ${requestId} (answered ${taskId}) stored as ${JSON.stringify(stored.map((r) => r.task_id))}`);
  }
  for (const r of rows) {
    if (!r.request_id || (!accepted.has(r.request_id) && !uncertain.has(r.request_id)))
      problems.push(`session task ${r.task_id} (${r.request_id}) was never sent`);
    const n = turns.get(r.task_id) ?? 0;
    // Without a cancel every task is done by exactly one finished turn; with one, a task may end cancelled (run or not).
    const ok = r.state === 'done' ? n === 1 && r.outcome === 'finished' : run.cancelled && r.state === 'cancelled' && n <= 1;
    if (!ok) problems.push(`session task ${r.task_id} (${r.request_id}) ended ${r.state}/${r.outcome} after ${n} turn(s)`);
  }
  for (const taskId of turns.keys()) if (!rows.some((r) => r.task_id === taskId)) problems.push(`session turn for unknown task ${taskId}`);

  // (2) Running, or closed by the schedule's cancel; no workflow task failed.
  const described = await orchard.temporal.workflow.getHandle(workflowId).describe();
  const allowed = run.cancelled ? ['RUNNING', 'COMPLETED', 'CANCELED'] : ['RUNNING'];
  if (!allowed.includes(described.status.name)) problems.push(`session is ${described.status.name}${run.cancelled ? ' after a cancel' : ''}`);
  if (run.cancel && isOk(run.cancel) && described.status.name === 'RUNNING') problems.push('session still running after its cancel was answered');
  for (const f of await failedWorkflowTasks(orchard.temporal, workflowId)) problems.push(`session workflow task failed: ${f}`);

  // (4) One writer per worktree: one lease row, this chain's, never taken over; commands never overlapped or repeated.
  const leases = await orchard.pool.query<{ worktree: string; holder: string; generation: string }>(
    `SELECT worktree, holder, generation FROM worktree_leases WHERE holder LIKE $1`,
    [`%${workflowId}@%`],
  );
  const log = view.worktree ? join(view.worktree, 'writes.log') : undefined;
  const lines = log && existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').filter(Boolean) : [];
  if (leases.rowCount !== 1 && (leases.rowCount !== 0 || lines.length > 0)) problems.push(`session lease rows: ${JSON.stringify(leases.rows)}`);
  for (const l of leases.rows) {
    if (Number(l.generation) !== 1) problems.push(`session lease at generation ${l.generation} (a takeover on a worktree with one session)`);
    const groups = await orchard.pool.query<{ generation: string }>(`SELECT DISTINCT generation FROM lease_process_groups WHERE worktree = $1`, [l.worktree]);
    for (const g of groups.rows) if (Number(g.generation) !== Number(l.generation)) problems.push(`a command ran under lease generation ${g.generation}`);
  }
  const writes = overlaps(lines);
  problems.push(...writes.problems);
  check.notes.push(`session: ${rows.length} tasks (${rows.map((r) => r.state).join(',') || '-'}), ${writes.commands} commands`);
}

// ---------------------------------------------------------------------------------------------------------------
// The property

let cases = 0;

async function runCase(s: Stack, schedule: Schedule): Promise<void> {
  const started = Date.now();
  const deadline = started + CASE_MS;
  const run: Run = {
    orchestratorId: uniqueId('fuzz-orch'),
    sessionId: uniqueId('fuzz-sess'),
    updates: new Map(),
    signals: [],
    sends: new Map(),
    cancelled: false,
  };
  const { orchard } = s;
  const check: Check = { problems: [], notes: [] };
  try {
    await orchard.client.startOrchestrator({ orchestratorId: run.orchestratorId, repo: s.repo, title: 'fuzz' });
    await orchard.client.createSession({ sessionId: run.sessionId, title: run.sessionId, repo: s.repo });
    await execute(s, schedule, run, deadline);
    await checkOrchestrator(orchard, run, deadline, check);
    await checkSession(orchard, run, deadline, check);
  } finally {
    // Nothing of this case keeps running into the next (a failed check leaves the ids for a look in the Web UI).
    if (check.problems.length === 0) {
      for (const workflowId of [orchestratorWorkflowId(run.orchestratorId), sessionWorkflowId(run.sessionId)]) {
        await orchard.temporal.workflow
          .getHandle(workflowId)
          .terminate('schedule-fuzz case over')
          .catch(() => undefined);
      }
    }
  }
  cases += 1;
  // The checker counts in PostgreSQL, not in the stub's log: thousands of cases must not keep every request body.
  s.stub.requests.length = 0;
  const summary = `case ${cases}: ${schedule.ops.map(describeOp).join(' ')} — ${((Date.now() - started) / 1000).toFixed(1)} s; ${check.notes.join('; ')}`;
  console.log(`schedule-fuzz ${summary}`);
  if (check.problems.length > 0) {
    throw new Error(
      [
        `schedule-fuzz: the checker found ${check.problems.length} problem(s) (orchestrator ${run.orchestratorId}, session ${run.sessionId}):`,
        ...check.problems.map((p) => `  - ${p}`),
      ].join('\n'),
    );
  }
}

fuzzTest(
  'a randomized schedule of messages, sends, cancels, PostgreSQL cuts, worker restarts and lost responses loses nothing, doubles nothing, fails nothing',
  async (t) => {
    t.timeout(RUNS * CASE_MS + 120_000);
    const s = stack!;
    const replay = `ORCHARD_FUZZ_SEED=${SEED}${PATH ? ` ORCHARD_FUZZ_PATH=${PATH}` : ''} ORCHARD_FUZZ_RUNS=${RUNS} ORCHARD_FUZZ_MAX_CUT_MS=${MAX_CUT_MS}`;
    console.log(`schedule-fuzz: seed ${SEED}, ${RUNS} case(s), cuts up to ${MAX_CUT_MS} ms; replay with ${replay}`);
    const started = Date.now();
    try {
      await fc.assert(
        fc.asyncProperty(scheduleArb, (schedule) => runCase(s, schedule)),
        { seed: SEED, numRuns: RUNS, path: PATH, verbose: 1, endOnFailure: !SHRINK, includeErrorInReport: true },
      );
    } catch (err) {
      // fast-check's report carries the seed, the path and the failing schedule; say how to replay that case alone. A
      // replay runs the same schedule; the interleaving with the workers is the machine's, so a race may need a few.
      const message = (err as Error).message;
      const failedPath = /path: "([^"]+)"/.exec(message)?.[1];
      const again = `ORCHARD_FUZZ_SEED=${SEED}${failedPath ? ` ORCHARD_FUZZ_PATH=${failedPath} ORCHARD_FUZZ_RUNS=1` : ` ORCHARD_FUZZ_RUNS=${RUNS}`} ORCHARD_FUZZ_MAX_CUT_MS=${MAX_CUT_MS}`;
      t.fail(`${message}\nreplay the failing case: ${again} npm test -- test/faults/schedule-fuzz.test.ts`);
    } finally {
      // A failed case must not leave the database cut for whatever runs next.
      await restore(s.pg).catch(() => undefined);
    }
    t.log(`${cases} case(s) in ${((Date.now() - started) / 1000).toFixed(0)} s (seed ${SEED})`);
    t.pass();
  },
);
