import { join } from 'node:path';
import test from 'ava';
import { orchardEnv, runOrchard, spawnOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { loadScenario } from '../../activities/model/scenario';

const shared = sharedOrchard(test);
const ROUTE_FIRST = join(__dirname, '../../scenarios/route-first.json');

/** Runs the real CLI against the test run's dev server and this file's worker. */
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

test('orchestrator start, send --wait, status --json and roster drive and show one orchestrator', async (t) => {
  const id = uniqueId('orch-cli');
  const started = await orchard(['orchestrator', 'start', id, '--repo', makeRepo(), '--title', 'cli fleet', '--scripted', ROUTE_FIRST]);
  t.is(started.code, 0, started.stderr);

  const first = await orchard(['orchestrator', 'send', id, 'The login page test is flaky on CI', '--wait', '--json', '--request-id', 'r-1']);
  t.is(first.code, 0, first.stderr);
  const answered = JSON.parse(first.stdout);
  t.is(answered.turn.taskId, answered.messageId);
  t.is(answered.turn.outcome, 'finished');
  t.is(answered.deliveries.length, 1);
  t.is(answered.deliveries[0].via, 'create');
  const childId: string = answered.deliveries[0].childId;

  // A paraphrase goes to the same child; the human output names it and how.
  const second = await orchard(['orchestrator', 'send', id, 'Sign-in', 'keeps', 'failing', 'at', 'random', '--wait']);
  t.is(second.code, 0, second.stderr);
  // Turn numbers are not message numbers: the manifest of the child's first result may take a turn in between.
  const secondId = /: message (m\d+): turn \d+ finished: /.exec(second.stdout)?.[1];
  t.truthy(secondId, second.stdout);
  t.not(secondId, answered.messageId);
  t.regex(second.stdout, new RegExp(`\n  -> ${childId} via send \\(task t\\d+\\)\n$`));

  // A repeated request id is answered with the same message id, marked a duplicate; the deliveries below show it
  // was not routed again.
  const again = await orchard(['orchestrator', 'send', id, 'The login page test is flaky on CI', '--request-id', 'r-1', '--json']);
  t.is(again.code, 0, again.stderr);
  t.like(JSON.parse(again.stdout), { messageId: answered.messageId, duplicate: true });

  const status = await orchard(['orchestrator', 'status', id, '--json']);
  t.is(status.code, 0, status.stderr);
  const view = JSON.parse(status.stdout);
  t.is(view.orchestratorId, id);
  t.deepEqual(
    view.children.map((c: any) => [c.childId, c.title, c.agent, c.topicKey]),
    [[childId, 'Login page flaky test', 'coder', 'login-flake']],
  );
  const turnOf = (messageId: string) => view.turns.find((r: any) => r.taskId === messageId);
  t.is(turnOf(answered.messageId)?.outcome, 'finished');
  t.is(turnOf(secondId!)?.outcome, 'finished');
  t.deepEqual(
    view.deliveries.map((d: any) => [d.messageId, d.childId, d.via]),
    [
      [answered.messageId, childId, 'create'],
      [secondId, childId, 'send'],
    ],
  );

  const human = await orchard(['orchestrator', 'status', id]);
  t.is(human.code, 0, human.stderr);
  const childLine = human.stdout.split('\n').find((l) => l.trim().startsWith(childId));
  t.truthy(childLine, human.stdout);
  t.deepEqual(
    childLine!
      .trim()
      .split(/\s{2,}/)
      .slice(0, 4),
    [childId, 'Login page flaky test', 'coder', 'login-flake'],
  );

  // Exactly the text the roster query answers (what the model gets), and it lists the child.
  const roster = await orchard(['orchestrator', 'roster', id]);
  t.is(roster.code, 0, roster.stderr);
  t.is(roster.stdout, `${await shared().client.roster(id)}\n`);
  t.true(roster.stdout.split('\n').some((l) => l.startsWith(`${childId} | Login page flaky test | coder | `)));
});

test('an unknown orchestrator is a typed error with exit code 2 for send, status and roster', async (t) => {
  const ghost = uniqueId('ghost-orch');
  for (const args of [
    ['send', ghost, 'hello'],
    ['status', ghost],
    ['roster', ghost],
  ]) {
    const r = await orchard(['orchestrator', ...args]);
    t.is(r.code, 2, args.join(' '));
    t.regex(r.stderr, new RegExp(`^orchard: orchestrator_not_found: no orchestrator ${ghost}: start it with`), args.join(' '));
    t.is(r.stdout, '');
  }
  // A closed one says so, and a message to it is refused.
  const closed = uniqueId('closed-orch');
  await shared().client.startOrchestrator({ orchestratorId: closed, repo: makeRepo(), model: { provider: 'scripted', scenario: ROUTE_FIRST } });
  await shared().temporal.workflow.getHandle(`orchestrator/${closed}`).terminate('test closes it');
  const toClosed = await orchard(['orchestrator', 'send', closed, 'hello']);
  t.is(toClosed.code, 2);
  t.regex(toClosed.stderr, new RegExp(`^orchard: orchestrator_closed: orchestrator ${closed} is closed`));
  const badId = await orchard(['orchestrator', 'start', 'no/slashes', '--repo', makeRepo()]);
  t.is(badId.code, 2);
  t.regex(badId.stderr, /^orchard: invalid_input: orchestrator id "no\/slashes" is invalid/);
});

/** `orchard demo` runs its own worker (on a queue of its own) against the test run's Temporal and database. */
function demo(t: import('ava').ExecutionContext, args: string[]) {
  const env = orchardEnv({ ORCHARD_TASK_QUEUE: uniqueId('demo-q'), ORCHARD_HOST_ID: uniqueId('demo-host') });
  return spawnOrchard(t, ['demo', 'route-first', ...args], env);
}

test('orchard demo route-first --json: 3 children, every message delivered to the owner of its topic, exit 0', async (t) => {
  t.timeout(180_000);
  const demoRun = demo(t, ['--json']);
  const { code } = await demoRun.exit(170_000);
  t.is(code, 0, demoRun.stderr());
  const result = JSON.parse(demoRun.stdout());
  const scenario = await loadScenario(ROUTE_FIRST);
  t.is(result.children.length, 3);
  t.deepEqual(result.problems, []);
  const owner = new Map<string, string>(result.children.map((c: any) => [c.topicKey, c.childId]));
  t.is(result.messages.length, scenario.messages!.length);
  for (const [i, m] of scenario.messages!.entries()) {
    const delivered = result.deliveries.filter((d: any) => d.messageId === result.messages[i].messageId);
    t.is(delivered.length, 1, m.text);
    t.is(delivered[0].childId, owner.get(m.topic), m.text);
  }
});

test('orchard demo route-first exits non-zero and says why when a message does not reach the child its scenario expects', async (t) => {
  t.timeout(180_000);
  const scenario = await loadScenario(ROUTE_FIRST);
  // Message 4 is about the login page; this copy claims it belongs to billing, so the check must fail.
  const messages = scenario.messages!.map((m, i) => (i === 3 ? { ...m, topic: 'billing-export' } : m));
  const mislabeled = writeScenario({ ...scenario, messages });
  const demoRun = demo(t, ['--scenario', mislabeled]);
  const { code } = await demoRun.exit(170_000);
  t.is(code, 1, demoRun.stderr());
  t.regex(
    demoRun.stdout(),
    /route-first: FAILED:\n\s+- message 4 \(m\d+\): delivered to login-page-flaky-test-\w+, but topic billing-export is owned by billing-csv-export-\w+/,
  );
});
