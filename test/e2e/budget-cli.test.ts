import { join } from 'node:path';
import test from 'ava';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

const shared = sharedOrchard(test);
const BUDGET = join(__dirname, '../../scenarios/budget.json');
const TEAM = join(__dirname, '../../scenarios/team.json');

/** Runs the real CLI against the test run's dev server, database and this file's worker. */
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

test('session create --budget-tokens, status shows the budget, session budget raises it and the session goes on', async (t) => {
  t.timeout(180_000);
  const id = uniqueId('budget-cli');
  // 1000 tokens cannot hold the first call's reservation (the request alone is several kB): it is never sent.
  const created = await orchard([
    'session',
    'create',
    '--id',
    id,
    '--title',
    'budget',
    '--repo',
    makeRepo(),
    '--scenario',
    BUDGET,
    '--task',
    'Write NOTES.md',
    '--budget-tokens',
    '1000',
  ]);
  t.is(created.code, 0, created.stderr);
  await waitFor(async () => (await shared().client.status(id)).turnsCompleted === 1, 60_000);

  const status = await orchard(['session', 'status', id, '--json']);
  t.is(status.code, 0, status.stderr);
  const view = JSON.parse(status.stdout);
  t.is(view.lastTurn.outcome, 'budget_exhausted');
  t.deepEqual(view.budget, { limit: 1000, spent: 0, remaining: 1000, exhausted: true });
  const text = await orchard(['session', 'status', id]);
  t.regex(text.stdout, /budget: 0 spent of 1,000, 1,000 remaining \(exhausted: raise it to go on\)/);

  const bad = await orchard(['session', 'budget', id, '0']);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /orchard: invalid_input: limit must be a positive integer/);

  const raised = await orchard(['session', 'budget', id, '500000', '--request-id', 'raise-1', '--json']);
  t.is(raised.code, 0, raised.stderr);
  t.like(JSON.parse(raised.stdout), { limit: 500000, spent: 0, remaining: 500000 });
  const again = await orchard(['session', 'budget', id, '500000', '--request-id', 'raise-1']);
  t.regex(again.stdout, new RegExp(`${id}: budget: 0 spent of 500,000, 500,000 remaining`));

  const sent = await orchard(['session', 'send', id, 'carry on', '--wait']);
  t.is(sent.code, 0, sent.stderr + sent.stdout);
  const after = await shared().client.status(id);
  t.is(after.lastTurn?.outcome, 'finished');
  t.true(after.budget!.spent > 0 && after.budget!.remaining === 500000 - after.budget!.spent);
});

test('orchestrator start --budget-tokens and orchestrator budget: the status shows spent, escrowed and remaining', async (t) => {
  const id = uniqueId('budget-fleet');
  const started = await orchard(['orchestrator', 'start', id, '--repo', makeRepo(), '--budget-tokens', '50000']);
  t.is(started.code, 0, started.stderr);
  const status = await orchard(['orchestrator', 'status', id]);
  t.regex(status.stdout, /budget: 0 spent of 50,000, 0 escrowed, 50,000 remaining/);
  const raised = await orchard(['orchestrator', 'budget', id, '80000', '--json']);
  t.is(raised.code, 0, raised.stderr);
  t.deepEqual(JSON.parse(raised.stdout), { limit: 80000, spent: 0, escrowed: 0, remaining: 80000 });
  await orchard(['orchestrator', 'cancel', id]);
});

test('team start --budget-tokens: a Coordinator call past the budget is not sent; team status shows it; team budget raises it', async (t) => {
  t.timeout(120_000);
  const id = uniqueId('budget-team');
  const started = await orchard(['team', 'start', id, '--repo', makeRepo(), '--goal', 'Build it', '--scripted', TEAM, '--budget-tokens', '1000']);
  t.is(started.code, 0, started.stderr);
  await waitFor(async () => (await shared().client.teamStatus(id)).turns.length === 1, 60_000);
  const status = await orchard(['team', 'status', id, '--json']);
  const view = JSON.parse(status.stdout).status;
  t.is(view.turns[0].outcome, 'budget_exhausted');
  t.deepEqual(view.budget, { limit: 1000, spent: 0, escrowed: 0, remaining: 1000, exhausted: true });
  t.regex((await orchard(['team', 'status', id])).stdout, /budget: 0 spent of 1,000, 0 escrowed, 1,000 remaining \(exhausted: raise it to go on\)/);
  const raised = await orchard(['team', 'budget', id, '5000000', '--json']);
  t.is(raised.code, 0, raised.stderr);
  t.like(JSON.parse(raised.stdout), { limit: 5000000 });
  // The raise wakes the Coordinator: its next call is sent and charged.
  await waitFor(async () => ((await shared().client.teamStatus(id)).budget?.spent ?? 0) > 0, 60_000);
  await orchard(['team', 'cancel', id]);
});
