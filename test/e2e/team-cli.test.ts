import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import test from 'ava';
import { orchardEnv, runOrchard, spawnOrchard, workerEnv } from '../helpers/cli-process';
import { git, makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { loadScenario } from '../../activities/model/scenario';
import { closureInputOf, readBoard } from '../../activities/store/team';
import { validateClosure } from '../../workflows/team/closure';
import { memberSessionId } from '../../contract/member-session';
import { stickRuntime } from '../helpers/team';

const shared = sharedOrchard(test);
const TEAM = join(__dirname, '../../scenarios/team.json');

/** Runs the real CLI against the test run's dev server and this file's worker (DATABASE_URL unless `env` drops it). */
const orchard = (args: string[], env: NodeJS.ProcessEnv = {}) => runOrchard(args, { ...workerEnv(shared()), ...env });

test('team start --scripted, status --json and send: the board, the certificate row and the Coordinator turns of one delivered run', async (t) => {
  t.timeout(240_000);
  const id = uniqueId('team-cli');
  const repo = makeRepo();
  const started = await orchard([
    'team',
    'start',
    id,
    '--repo',
    repo,
    '--goal',
    'Build a poker hand evaluator with tests',
    '--member',
    'implementer:Implementer',
    '--member',
    'tester:Tester',
    '--scripted',
    TEAM,
  ]);
  t.is(started.code, 0, started.stderr);
  await waitFor(async () => ((await shared().client.teamStatus(id)).status === 'delivered' ? true : undefined), 180_000, 'the team delivered');

  const status = await orchard(['team', 'status', id, '--json']);
  t.is(status.code, 0, status.stderr);
  const report = JSON.parse(status.stdout);
  t.deepEqual(Object.keys(report).sort(), ['board', 'certificate', 'status']);
  t.is(report.status.teamId, id);
  t.deepEqual(
    report.status.members.map((m: any) => [m.memberId, m.role]),
    [
      ['implementer', 'Implementer'],
      ['tester', 'Tester'],
    ],
  );
  // The board as Postgres has it: each planned task with its owner, completed with its own output.
  const board = await readBoard(shared().pool, id);
  t.deepEqual(
    report.board.tasks.map((task: any) => [task.id, task.owner, task.status, task.outputId, task.replacesTaskId, task.cancel]),
    board.tasks.map((task) => [task.taskId, task.owner, 'completed', task.outputId, null, null]),
  );
  t.deepEqual(
    report.board.tasks.map((task: any) => [task.id, task.owner]),
    [
      ['implement-evaluator', 'implementer'],
      ['test-evaluator', 'tester'],
    ],
  );
  // The certificate is the row in team_certificates, whole.
  const rows = (await shared().pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [id])).rows;
  t.is(rows.length, 1);
  t.deepEqual(report.certificate, rows[0].certificate);
  t.deepEqual([...report.certificate.evidence.outputIds].sort(), report.board.tasks.map((task: any) => task.outputId).sort());
  t.is(report.status.certificate.certificateId, report.certificate.certificateId);
  // Every execution completed; the Tester's branch holds the tested program.
  t.deepEqual(
    report.status.executions.map((e: any) => [e.taskId, e.memberId, e.state]),
    [
      ['implement-evaluator', 'implementer', 'completed'],
      ['test-evaluator', 'tester', 'completed'],
    ],
  );
  t.deepEqual(
    git(repo, 'ls-tree', '--name-only', `orchard/${memberSessionId(id, 'tester')}/work`)
      .split('\n')
      .sort(),
    ['README.md', 'evaluator.js', 'evaluator.test.js'],
  );

  // The human view: a row per task, the certificate, and the turn that cited it.
  const human = await orchard(['team', 'status', id]);
  t.is(human.code, 0, human.stderr);
  const row = human.stdout.split('\n').find((l) => l.trim().startsWith('test-evaluator '));
  t.truthy(row, human.stdout);
  const cells = row!.trim().split(/\s{2,}/);
  t.deepEqual([cells[0], cells[2], cells[3], cells[4]], ['test-evaluator', 'tester', 'completed', board.tasks[1].outputId]);
  t.true(human.stdout.includes(`certificate ${report.certificate.certificateId}: delivered`));

  // A message is accepted once per request id, and wakes one Coordinator turn that finds nothing to do.
  const turnsBefore = report.status.turns.length;
  const sent = await orchard(['team', 'send', id, 'anything', 'left?', '--request-id', 'q-1', '--json']);
  t.is(sent.code, 0, sent.stderr);
  const accepted = JSON.parse(sent.stdout);
  t.false(accepted.duplicate);
  const again = await orchard(['team', 'send', id, 'anything', 'left?', '--request-id', 'q-1', '--json']);
  t.like(JSON.parse(again.stdout), { messageId: accepted.messageId, duplicate: true });
  const after = await waitFor(
    async () => {
      const v = await shared().client.teamStatus(id);
      return v.turns.length > turnsBefore && v.status === 'delivered' ? v : undefined;
    },
    60_000,
    'the message answered',
  );
  t.is(after.turns.length, turnsBefore + 1);
  t.is(after.turns.at(-1)!.outcome, 'waiting_for_org_event');
  t.is((await shared().pool.query('SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1', [id])).rows[0].n, 1);

  // Without a database the status still answers, without the board.
  const noDb = await orchard(['team', 'status', id, '--json'], { DATABASE_URL: undefined });
  t.is(noDb.code, 0, noDb.stderr);
  t.like(JSON.parse(noDb.stdout), { board: null, certificate: null, status: { status: 'delivered' } });
});

test('an unknown team is team_not_found with exit code 2 for send and status; a malformed --member is refused', async (t) => {
  const ghost = uniqueId('ghost-team');
  for (const args of [
    ['send', ghost, 'hello'],
    ['status', ghost],
    ['status', ghost, '--json'],
  ]) {
    const r = await orchard(['team', ...args]);
    t.is(r.code, 2, args.join(' '));
    // With --json the failure is JSON on stdout; without, one line on stderr.
    const json = args.includes('--json');
    const failure = json ? (JSON.parse(r.stdout) as { error: { code: string; message: string } }).error : undefined;
    const line = json ? `orchard: ${failure!.code}: ${failure!.message}` : r.stderr;
    t.regex(line, new RegExp(`^orchard: team_not_found: no team ${ghost}: start it with`), args.join(' '));
    t.is(json ? r.stderr : r.stdout, '');
  }
  const badMember = await orchard(['team', 'start', uniqueId('t'), '--repo', makeRepo(), '--goal', 'x', '--member', 'implementer']);
  t.is(badMember.code, 2);
  t.regex(badMember.stderr, /give a member as <id>:<Role>/);
  const badId = await orchard(['team', 'start', 'no/slashes', '--repo', makeRepo(), '--goal', 'x']);
  t.is(badId.code, 2);
  t.regex(badId.stderr, /^orchard: invalid_input: team id "no\/slashes" is invalid/);
});

/** `orchard demo` runs its own worker (on a queue of its own) against the test run's Temporal and database. */
function demo(t: import('ava').ExecutionContext, args: string[], name = 'team') {
  const env = orchardEnv({ ORCHARD_TASK_QUEUE: uniqueId('demo-q'), ORCHARD_HOST_ID: uniqueId('demo-host') });
  return spawnOrchard(t, ['demo', name, ...args], env);
}

/** The nanosecond timestamps a writer left in its log (the first field of each line), read from disk. */
const stampsOn = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => BigInt(line.split(' ')[0]));

test('orchard demo team --json: a task reassigned while its execution writes; receipt requested → yielding → released, writers never overlap, delivered with one certificate', async (t) => {
  t.timeout(300_000);
  const demoRun = demo(t, ['--json']);
  const { code } = await demoRun.exit(290_000);
  t.is(code, 0, `${demoRun.stderr()}\n${demoRun.stdout().slice(-3000)}`);
  const result = JSON.parse(demoRun.stdout());
  t.deepEqual(result.problems, []);
  t.is(result.status.status, 'delivered');
  const teamId: string = result.status.teamId;
  const pool = shared().pool;
  t.is((await pool.query('SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1', [teamId])).rows[0].n, 1);
  // The four members each worked: the Tester's execution was handed off, the Reviewer's replacement completed.
  t.deepEqual(
    result.status.executions.map((e: any) => [e.taskId, e.memberId, e.state]),
    [
      ['plan-evaluator', 'planner', 'completed'],
      ['implement-evaluator', 'implementer', 'completed'],
      ['test-evaluator', 'tester', 'handed_off'],
      ['test-evaluator-r1', 'reviewer', 'completed'],
    ],
  );
  // The board in Postgres: the original cancelled by the user for the reassign, citing a user event about it; the
  // replacement the Reviewer's, completed with an output of its own; the rest completed with theirs.
  const board = await readBoard(pool, teamId);
  const task = (id: string) => board.tasks.find((x) => x.taskId === id)!;
  t.like(task('test-evaluator'), { status: 'cancelled', owner: 'tester', cancel: { by: 'user', kind: 'reassign' } });
  const event = board.userEvents.find((e) => e.id === task('test-evaluator').cancel!.userEventId);
  t.like(event, { kind: 'reassign', taskId: 'test-evaluator' });
  t.like(task('test-evaluator-r1'), { status: 'completed', owner: 'reviewer', replacesTaskId: 'test-evaluator' });
  for (const id of ['plan-evaluator', 'implement-evaluator', 'test-evaluator-r1']) {
    t.true(
      board.outputs.some((o) => o.outputId === task(id).outputId && o.taskId === id),
      id,
    );
  }
  t.deepEqual(board.handoffs, [{ oldTaskId: 'test-evaluator', newTaskId: 'test-evaluator-r1', state: 'released' }]);
  // The receipt as the JSON reports it is the workflow's and the row's.
  t.deepEqual(result.handoff.receipt.trail, ['requested', 'yielding', 'released']);
  t.deepEqual(result.handoff.receipt, result.status.receipts[0]);
  const row = (await pool.query('SELECT receipt_id, state, owner FROM team_handoff_receipts WHERE team_id = $1', [teamId])).rows;
  t.deepEqual(row, [{ receipt_id: result.handoff.receipt.receiptId, state: 'released', owner: 'tester' }]);
  // The timestamps on disk, read here: the old writer was stopped early (the script writes 600 lines) and its last
  // line precedes the new writer's first. The JSON reports the same timestamps.
  const { oldWriter, newWriter } = result.handoff;
  t.is(oldWriter.sessionId, memberSessionId(teamId, 'tester'));
  t.is(newWriter.sessionId, memberSessionId(teamId, 'reviewer'));
  const oldStamps = stampsOn(oldWriter.path);
  const newStamps = stampsOn(newWriter.path);
  t.true(oldStamps.length >= 5 && oldStamps.length < 600, `${oldStamps.length} old lines`);
  t.is(newStamps.length, 3);
  t.true(oldStamps.at(-1)! < newStamps[0], `old ended ${oldStamps.at(-1)}, new began ${newStamps[0]}`);
  t.deepEqual([oldWriter.lines, oldWriter.firstNs, oldWriter.lastNs], [oldStamps.length, String(oldStamps[0]), String(oldStamps.at(-1))]);
  t.deepEqual([newWriter.lines, newWriter.firstNs, newWriter.lastNs], [newStamps.length, String(newStamps[0]), String(newStamps.at(-1))]);
  // The certificate cites the replacement's output, and counts the original through it (the reassign's user event stays on the task).
  const certificate = (await pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [teamId])).rows[0].certificate;
  t.deepEqual(result.certificate, certificate);
  t.deepEqual([...certificate.evidence.taskIds].sort(), board.tasks.map((x) => x.taskId).sort());
  t.deepEqual([...certificate.evidence.outputIds].sort(), ['plan-evaluator', 'implement-evaluator', 'test-evaluator-r1'].map((id) => task(id).outputId).sort());
  t.deepEqual(
    certificate.resolutions.find((r: any) => r.taskId === 'test-evaluator'),
    { taskId: 'test-evaluator', kind: 'replaced_by', by: 'test-evaluator-r1' },
  );
  t.is(task('test-evaluator').cancel?.userEventId, event!.id);
  // The Reviewer's branch holds the tested program; the Tester's branch has no commit (it was stopped).
  const worktree = dirname(newWriter.path);
  t.deepEqual(
    git(worktree, 'ls-tree', '--name-only', `orchard/${memberSessionId(teamId, 'reviewer')}/work`)
      .split('\n')
      .sort(),
    ['README.md', 'evaluator.js', 'evaluator.test.js'],
  );
  t.is(git(worktree, 'rev-list', '--count', `main..orchard/${memberSessionId(teamId, 'tester')}/work`), '0');
  t.regex(demoRun.stderr(), /\[demo\] the user reassigns test-evaluator from tester to reviewer while it writes/);
});

test('orchard demo team --scenario scenarios/team-verify.json --json: paused mid-task and resumed; verify fails, a Member fixes it, delivered bound to the passing run', async (t) => {
  t.timeout(300_000);
  const demoRun = demo(t, ['--json', '--scenario', join(__dirname, '../../scenarios/team-verify.json')]);
  const { code } = await demoRun.exit(290_000);
  t.is(code, 0, `${demoRun.stderr()}\n${demoRun.stdout().slice(-3000)}`);
  const result = JSON.parse(demoRun.stdout());
  t.deepEqual(result.problems, []);
  t.is(result.status.outcome, 'delivered');
  const teamId: string = result.status.teamId;
  const pool = shared().pool;
  // The pause: the running execution was fenced (a receipt of kind pause, released) and the task ran again.
  const pauses = (await pool.query(`SELECT state, reason FROM team_handoff_receipts WHERE team_id = $1`, [teamId])).rows;
  t.deepEqual(
    pauses.map((r) => [r.state, r.reason.kind]),
    [['released', 'pause']],
  );
  t.deepEqual(
    result.status.executions.map((e: any) => [e.taskId, e.state]),
    [
      ['implement-sum', 'paused'],
      ['implement-sum', 'completed'],
      ['fix-sum', 'completed'],
    ],
  );
  // The verify command: failed on the first result, passed on the fixed one, which the certificate binds.
  const runs = (
    await pool.query(`SELECT verification_id, purpose, exit_code, result_head FROM team_verifications WHERE team_id = $1 ORDER BY created_at`, [teamId])
  ).rows;
  t.deepEqual(
    runs.map((r) => [r.purpose, r.exit_code === 0]),
    [
      ['completion', false],
      ['completion', true],
      ['recheck', true],
    ],
  );
  const certificate = (await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1`, [teamId])).rows[0].certificate;
  t.is(certificate.verification.verificationId, runs[1].verification_id);
  t.is(certificate.verification.resultHead, certificate.result.head);
  t.is(certificate.verification.command, 'node --test');
});

test('orchard demo team-all-cancelled --json: every task cancelled by the user, org_run_complete refused, not delivered and why; exit 0', async (t) => {
  t.timeout(300_000);
  const demoRun = demo(t, ['--json'], 'team-all-cancelled');
  const { code } = await demoRun.exit(290_000);
  t.is(code, 0, demoRun.stderr());
  const result = JSON.parse(demoRun.stdout());
  t.deepEqual(result.problems, []);
  const teamId: string = result.status.teamId;
  const pool = shared().pool;
  // Not delivered: no certificate in the workflow or in Postgres.
  t.not(result.status.status, 'delivered');
  t.is(result.status.certificate, undefined);
  t.is(result.certificate, null);
  // The users removed every task: the run's outcome is theirs, cancelled.
  t.is(result.status.outcome, 'cancelled');
  t.is((await pool.query('SELECT count(*)::int AS n FROM team_certificates WHERE team_id = $1', [teamId])).rows[0].n, 0);
  // Every task on the board is cancelled by the user, each citing a user event about it.
  const board = await readBoard(pool, teamId);
  t.deepEqual(
    board.tasks.map((task) => [task.taskId, task.status, task.cancel?.by]),
    [
      ['plan-evaluator', 'cancelled', 'user'],
      ['implement-evaluator', 'cancelled', 'user'],
      ['test-evaluator', 'cancelled', 'user'],
    ],
  );
  for (const task of board.tasks)
    t.like(
      board.userEvents.find((e) => e.id === task.cancel!.userEventId),
      { taskId: task.taskId },
      task.taskId,
    );
  t.deepEqual(board.outputs, []);
  // The Planner was cancelled while it wrote: a receipt of kind cancel, released; its log stopped growing.
  t.deepEqual(
    result.status.receipts.map((r: any) => [r.kind, r.oldTaskId, r.newTaskId ?? null, r.trail]),
    [['cancel', 'plan-evaluator', null, ['requested', 'yielding', 'released']]],
  );
  t.deepEqual(
    board.handoffs.map((h) => [h.oldTaskId, h.state]),
    [['plan-evaluator', 'released']],
  );
  const lines = readFileSync(result.writer.path, 'utf8').split('\n').filter(Boolean).length;
  t.true(lines >= 5 && lines < 600, `${lines} lines`);
  t.is(result.writer.lines, lines);
  // Why: the validator's reasons (the same validator, run here on the board as Postgres has it), and the
  // Coordinator's org_run_complete refused with them.
  const closure = validateClosure(closureInputOf(board, 0));
  t.is(closure.outcome, 'cancelled');
  t.deepEqual(result.closure, { outcome: closure.outcome, reasons: closure.reasons });
  t.deepEqual(
    result.closure.reasons.map((r: any) => r.code),
    ['all_cancelled'],
  );
  t.deepEqual(result.status.refusals, [{ tool: 'org_run_complete', code: 'completion_refused' }]);
  t.regex(result.status.turns.at(-1).finalExcerpt, /completion_refused\): the run is cancelled: all_cancelled/);
});

test('orchard demo team exits 1 and says why when the tested program does not pass its tests, although the run was delivered', async (t) => {
  t.timeout(300_000);
  const scenario = await loadScenario(TEAM);
  // The Tester's test file asserts something false: the run is still certified (the turn finished), but the
  // demo's own check runs node --test on the Tester's branch and must fail.
  const tester = scenario.members!.tester.map((turn) => ({
    ...turn,
    steps: turn.steps.map((step) =>
      step.tool_calls?.[0]?.name === 'write_file'
        ? {
            ...step,
            tool_calls: [
              {
                name: 'write_file',
                arguments: { path: 'evaluator.test.js', content: "require('node:test')('wrong', () => require('node:assert').strictEqual(1, 2));\n" },
              },
            ],
          }
        : step,
    ),
  }));
  const broken = writeScenario({ ...scenario, members: { ...scenario.members, tester } });
  const demoRun = demo(t, ['--scenario', broken]);
  const { code } = await demoRun.exit(290_000);
  t.is(code, 1, demoRun.stderr());
  t.regex(demoRun.stdout(), /team: FAILED:\n\s+- node --test on orchard\/team-[a-z0-9]+__tester\/work did not pass \(exit 1\)/);
  t.regex(demoRun.stdout(), /certificate cert-team-\w+-g1-r\d+: delivered/);
});

test('team reassign and resolve-handoff refuse what they cannot do with typed errors and exit 2', async (t) => {
  const id = uniqueId('team-cli-refuse');
  const repo = makeRepo();
  const started = await orchard([
    'team',
    'start',
    id,
    '--repo',
    repo,
    '--goal',
    'Build a poker hand evaluator with tests',
    '--member',
    'implementer:Implementer',
    '--member',
    'tester:Tester',
    '--scripted',
    TEAM,
  ]);
  t.is(started.code, 0, started.stderr);
  const cases: [string[], RegExp][] = [
    [['team', 'reassign', id, 'no-such-task', '--to', 'tester', '--reason', 'x'], /^orchard: task_not_found: no task no-such-task/],
    [['team', 'resolve-handoff', id, 'handoff-x', 'release'], /^orchard: receipt_not_found: /],
    [['team', 'resolve-handoff', id, 'handoff-x', 'shrug'], /^orchard: invalid_input: action must be keep_stopped or release/],
    [['team', 'reassign', uniqueId('no-team'), 't1', '--to', 'tester', '--reason', 'x'], /^orchard: team_not_found: /],
    [['team', 'start', `${id}-bad`, '--repo', repo, '--goal', 'g', '--handoff-slo', 'soon'], /^orchard: invalid_input: handoff\.sloMs must be a whole number/],
    [
      ['team', 'start', `${id}-bad`, '--repo', repo, '--goal', 'g', '--handoff-slo', '5000', '--handoff-timeout', '100'],
      /^orchard: invalid_input: handoff\.sloMs \(5000\) must not be later than handoff\.timeoutMs \(100\)/,
    ],
    [['team', 'start', `${id}-bad`, '--repo', repo, '--goal', 'g', '--handoff-timeout', '0'], /^orchard: invalid_input: handoff\.timeoutMs must be/],
  ];
  for (const [args, expected] of cases) {
    const result = await orchard(args);
    t.is(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
    t.regex(result.stderr, expected);
  }
  // The refused starts started nothing.
  const none = await orchard(['team', 'status', `${id}-bad`]);
  t.is(none.code, 2);
  t.regex(none.stderr, /^orchard: team_not_found: /);
});

/** Starts the scripted handoff team from the CLI (four members) and returns its id once the Tester's long sweep writes. */
async function startSweepingTeam(t: import('ava').ExecutionContext, prefix: string, extra: string[] = []): Promise<string> {
  const id = uniqueId(prefix);
  const members = ['planner:Planner', 'implementer:Implementer', 'reviewer:Reviewer', 'tester:Tester'].flatMap((m) => ['--member', m]);
  const goal = 'Build a poker hand evaluator with tests';
  const started = await orchard([
    'team',
    'start',
    id,
    '--repo',
    makeRepo(),
    '--goal',
    goal,
    ...members,
    '--scripted',
    join(__dirname, '../../scenarios/team-handoff.json'),
    ...extra,
  ]);
  t.is(started.code, 0, started.stderr);
  await waitFor(
    async () => {
      const s = await shared()
        .client.status(memberSessionId(id, 'tester'))
        .catch(() => undefined);
      const log = s?.worktree ? join(s.worktree, 'sweep.log') : undefined;
      return log && existsSync(log) && readFileSync(log, 'utf8').split('\n').length > 3 ? true : undefined;
    },
    180_000,
    'the tester sweeping',
  );
  return id;
}

test('team resolve-handoff from the CLI: a timed-out reassign (short --handoff-* durations) is kept stopped, then released once the old runtime is quiescent', async (t) => {
  t.timeout(300_000);
  const id = await startSweepingTeam(t, 'team-cli-resolve', ['--handoff-slo', '200', '--handoff-timeout', '1000']);
  // The tester's runtime cannot be proven quiescent (a process group of it not verified gone).
  const stuck = await stickRuntime(shared(), memberSessionId(id, 'tester'));
  const reassigned = await orchard(['team', 'reassign', id, 'test-evaluator', '--to', 'reviewer', '--reason', 'the sweep is too slow', '--json']);
  t.is(reassigned.code, 0, reassigned.stderr);
  const { receiptId } = JSON.parse(reassigned.stdout);
  await waitFor(async () => ((await shared().client.teamStatus(id)).receipts[0]?.state === 'timeout' ? true : undefined), 60_000, 'the timeout');
  const status = JSON.parse((await orchard(['team', 'status', id, '--json'])).stdout);
  t.like(status.status.receipts[0], { receiptId, state: 'timeout', sloMissed: true });
  t.deepEqual(status.status.waiting, [{ taskId: 'test-evaluator-r1', waiting: 'waiting_for_previous_execution', receiptId }]);

  // No release without the proof: exit 2, nothing changed.
  const revision = (await readBoard(shared().pool, id)).workRevision;
  const refused = await orchard(['team', 'resolve-handoff', id, receiptId, 'release']);
  t.is(refused.code, 2, refused.stderr);
  t.regex(refused.stderr, /^orchard: old_runtime_not_quiescent: .*process group/);
  t.is((await readBoard(shared().pool, id)).workRevision, revision);

  // keep_stopped: only the replacement is cancelled (by the user), the handoff is settled.
  const kept = await orchard(['team', 'resolve-handoff', id, receiptId, 'keep_stopped', '--reason', 'not needed after all', '--json']);
  t.is(kept.code, 0, kept.stderr);
  t.like(JSON.parse(kept.stdout), { receiptId, state: 'timeout', resolution: 'keep_stopped' });
  const board = await readBoard(shared().pool, id);
  t.like(
    board.tasks.find((task) => task.taskId === 'test-evaluator-r1'),
    { status: 'cancelled', cancel: { by: 'user', kind: 'keep_stopped', reason: 'not needed after all' } },
  );
  t.deepEqual((await shared().client.teamStatus(id)).waiting, []);

  // Once the old runtime is quiescent, release: the receipt is released, the replacement stays cancelled.
  await stuck.unstick();
  const released = await waitFor(
    async () => {
      const r = await orchard(['team', 'resolve-handoff', id, receiptId, 'release', '--reason', 'checked by hand', '--json']);
      return r.code === 0 ? r : /old_runtime_not_quiescent/.test(r.stderr) ? undefined : Promise.reject(new Error(r.stderr));
    },
    60_000,
    'a release with proof',
  );
  t.like(JSON.parse(released.stdout), { receiptId, state: 'released', resolution: 'release' });
  t.like(
    (await readBoard(shared().pool, id)).tasks.find((task) => task.taskId === 'test-evaluator-r1'),
    { status: 'cancelled' },
  );
  const human = await orchard(['team', 'resolve-handoff', id, receiptId, 'keep_stopped']);
  t.is(human.code, 2);
  t.regex(human.stderr, /^orchard: handoff_not_blocked: /);
});

test('team reassign and cancel-task from the CLI: a running task handed over (receipt to released, delivered), then a finished one refused', async (t) => {
  t.timeout(300_000);
  const id = await startSweepingTeam(t, 'team-cli-handoff');
  const reassigned = await orchard(['team', 'reassign', id, 'test-evaluator', '--to', 'reviewer', '--reason', 'the sweep is too slow', '--json']);
  t.is(reassigned.code, 0, reassigned.stderr);
  const receipt = JSON.parse(reassigned.stdout);
  t.like(receipt, { oldTaskId: 'test-evaluator', newTaskId: 'test-evaluator-r1', oldOwner: 'tester', newOwner: 'reviewer' });
  t.true(['requested', 'yielding', 'released'].includes(receipt.state), receipt.state);
  await waitFor(async () => ((await shared().client.teamStatus(id)).status === 'delivered' ? true : undefined), 240_000, 'the team delivered');

  const status = JSON.parse((await orchard(['team', 'status', id, '--json'])).stdout);
  t.like(status.status.receipts[0], { receiptId: receipt.receiptId, state: 'released' });
  t.deepEqual(
    status.board.tasks.filter((task: any) => task.id.startsWith('test-evaluator')).map((task: any) => [task.id, task.owner, task.status, task.replacesTaskId]),
    [
      ['test-evaluator', 'tester', 'cancelled', null],
      ['test-evaluator-r1', 'reviewer', 'completed', 'test-evaluator'],
    ],
  );
  // Finished work is not the user's to cancel any more: refused, exit 2, nothing changed.
  const revision = (await readBoard(shared().pool, id)).workRevision;
  const cancelled = await orchard(['team', 'cancel-task', id, 'test-evaluator-r1', '--reason', 'too late']);
  t.is(cancelled.code, 2, cancelled.stderr);
  t.regex(cancelled.stderr, /^orchard: task_not_pending: /);
  t.is((await readBoard(shared().pool, id)).workRevision, revision);
});

test('team pause, resume and archive from the CLI: a running task paused and started again, then the run archived; refusals typed with exit 2', async (t) => {
  t.timeout(240_000);
  const id = uniqueId('team-cli-steer');
  const repo = makeRepo();
  // One task whose Member works for a long time (a bash sleep): it is running whenever the CLI steers the team.
  const scenario = writeScenario({
    name: 'team-steer',
    model: 'scripted-team',
    coordinator: {
      tasks: [{ taskId: 'slow', title: 'A slow task', description: 'Sleep for a long time.', owner: 'implementer' }],
      completion: 'done',
      summary: 'Delivered, certificate {{certificate}}.',
      reply: 'Done: {{result}}',
      waiting: 'Nothing to do until a member reports.',
    },
    members: { implementer: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'sleep 600' } }] }, { content: 'done' }] }] },
  });
  const started = await orchard([
    'team',
    'start',
    id,
    '--repo',
    repo,
    '--goal',
    'Do the slow task',
    '--member',
    'implementer:Implementer',
    '--scripted',
    scenario,
    // Generous handoff timers: on a loaded machine stopping the Member's command may take more than the default 10 s.
    '--handoff-slo',
    '60000',
    '--handoff-timeout',
    '120000',
  ]);
  t.is(started.code, 0, started.stderr);
  const runningExecution = async () =>
    waitFor(
      async () => (await shared().client.teamStatus(id)).executions.find((e) => e.taskId === 'slow' && e.state === 'running'),
      120_000,
      'the slow task running',
    );
  const first = await runningExecution();

  const paused = await orchard(['team', 'pause', id, '--reason', 'hold on', '--json']);
  t.is(paused.code, 0, paused.stderr);
  const pausedResult = JSON.parse(paused.stdout);
  t.is(pausedResult.state, 'paused');
  t.deepEqual(
    pausedResult.receipts.map((r: any) => [r.kind, r.oldTaskId]),
    [['pause', 'slow']],
  );
  const again = await orchard(['team', 'pause', id, '--reason', 'again', '--json']);
  t.is(again.code, 2);
  t.is(JSON.parse(again.stdout || again.stderr).error.code, 'team_paused');
  const text = await orchard(['team', 'status', id]);
  t.regex(text.stdout, new RegExp(`^team ${id} \\| running \\(paused\\)`, 'm'));

  const resumed = await orchard(['team', 'resume', id, '--reason', 'go on']);
  t.is(resumed.code, 0, resumed.stderr);
  t.regex(resumed.stdout, new RegExp(`^${id}: running at revision \\d+`));
  const second = await runningExecution();
  t.not(second.executionId, first.executionId);

  const archived = await orchard(['team', 'archive', id, '--reason', 'not needed', '--json']);
  t.is(archived.code, 0, archived.stderr);
  t.like(JSON.parse(archived.stdout), { state: 'archived' });
  const board = await readBoard(shared().pool, id);
  t.deepEqual(
    board.tasks.map((task) => [task.taskId, task.status, task.cancel?.kind]),
    [['slow', 'cancelled', 'archive']],
  );
  const late = await orchard(['team', 'archive', id, '--reason', 'again']);
  t.is(late.code, 2);
  t.regex(late.stderr, /^orchard: team_not_running: /);
});
