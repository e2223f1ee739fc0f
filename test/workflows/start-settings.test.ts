import test from 'ava';
import { join } from 'node:path';
import { OrchardError, settingsDifferences } from '../../client/client';
import { orchestratorStartQuery, teamStartQuery } from '../../contract/messages';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';

const ROUTE_FIRST = join(__dirname, '../../scenarios/route-first.json');
const TEAM = join(__dirname, '../../scenarios/team.json');

/** The start is refused with `already_running_with`, and the message names each differing setting. */
async function refusedWith(t: import('ava').ExecutionContext, start: Promise<void>, ...names: string[]): Promise<void> {
  const err = await t.throwsAsync(start);
  t.true(err instanceof OrchardError, String(err));
  t.is((err as OrchardError).code, 'already_running_with', err?.message);
  for (const name of names) t.regex(err!.message, new RegExp(`\\b${name}: running `), err?.message);
}

test('a second start of a running orchestrator is idempotent with its settings and refused with others, changing nothing', async (t) => {
  const orchard = await startOrchard(t);
  const id = uniqueId('settings-orch');
  const repo = makeRepo();
  const model = { provider: 'scripted' as const, scenario: ROUTE_FIRST };
  const start = { orchestratorId: id, repo, title: 'fleet', model, childModel: model };
  await orchard.client.startOrchestrator(start);
  const handle = orchard.temporal.workflow.getHandle(`orchestrator/${id}`);
  const firstRun = (await handle.describe()).runId;

  // The same settings again, or a subset of them: found, not refused.
  await orchard.client.startOrchestrator(start);
  await orchard.client.startOrchestrator({ orchestratorId: id, repo });

  const otherRepo = makeRepo();
  await refusedWith(t, orchard.client.startOrchestrator({ ...start, repo: otherRepo }), 'repo');
  await refusedWith(t, orchard.client.startOrchestrator({ ...start, title: 'another', host: 'elsewhere' }), 'title', 'host');

  // Nothing changed: the same run, with the settings it started with.
  const running = await handle.query(orchestratorStartQuery);
  t.is(running.repo, repo);
  t.is(running.title, 'fleet');
  t.is((await handle.describe()).runId, firstRun);
});

test('a second start of a running team run with another goal or other members is refused; the same start finds it', async (t) => {
  const orchard = await startOrchard(t);
  const teamId = uniqueId('settings-team');
  const model = { provider: 'scripted' as const, scenario: TEAM };
  const members = [
    { memberId: 'implementer', role: 'Implementer' },
    { memberId: 'tester', role: 'Tester' },
  ];
  const start = { teamId, repo: makeRepo(), goal: 'Write a poker hand evaluator', members, model, memberModel: model };
  await orchard.client.startTeam(start);
  const handle = orchard.temporal.workflow.getHandle(`team/${teamId}`);

  await orchard.client.startTeam(start);
  await refusedWith(t, orchard.client.startTeam({ ...start, goal: 'Something else' }), 'goal');
  await refusedWith(t, orchard.client.startTeam({ ...start, members: [members[0]] }), 'members');

  const running = await handle.query(teamStartQuery);
  t.is(running.goal, 'Write a poker hand evaluator');
  t.is(running.members?.length, 2);
});

test('settingsDifferences: only the settings the request gives count, key order does not', (t) => {
  type Settings = { repo: string; host: string; model?: { provider: string; scenario: string }; title?: string };
  const running: Settings = { repo: '/r', host: 'h', model: { provider: 'scripted', scenario: '/s' }, title: 't' };
  t.deepEqual(settingsDifferences<Settings>(running, { repo: '/r', host: 'h', model: { scenario: '/s', provider: 'scripted' }, title: undefined }), []);
  t.deepEqual(settingsDifferences<Settings>(running, { repo: '/other', host: 'h', model: undefined, title: 't' }), ['repo: running "/r", asked "/other"']);
  t.deepEqual(settingsDifferences<Settings>({ ...running, title: undefined }, { ...running, title: 'new' }), ['title: running unset, asked "new"']);
});
