import { existsSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { memberSessionId } from '../../contract/member-session';
import { git, makeRepo, sharedOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

const shared = sharedOrchard(test);
const TEAM = join(__dirname, '../../scenarios/team.json');
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

test("orchard team merge: refused not_delivered before delivery; after it main gets the result (the members' files), and a repeat changes nothing", async (t) => {
  t.timeout(240_000);
  const id = uniqueId('team-merge-cli');
  const repo = makeRepo();
  const mainAtStart = git(repo, 'rev-parse', 'main');
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

  // The scripted run takes many model steps and two member sessions: this merge comes long before its certificate.
  const early = await orchard(['team', 'merge', id]);
  t.is(early.code, 2, early.stderr);
  t.regex(early.stderr, new RegExp(`^orchard: not_delivered: team ${id} is not delivered`));
  t.is(early.stdout, '');
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart);

  await waitFor(async () => ((await shared().client.teamStatus(id)).status === 'delivered' ? true : undefined), 200_000, 'the team delivered');
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart, 'delivery itself does not move main');
  const { certificate } = (await shared().pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [id])).rows[0];

  const status = await orchard(['team', 'status', id]);
  t.true(
    status.stdout.includes(`  result: orchard/team/${id}/result at ${certificate.result.head.slice(0, 12)} (from main at ${mainAtStart.slice(0, 12)})`),
    status.stdout,
  );

  const merged = await orchard(['team', 'merge', id, '--json']);
  t.is(merged.code, 0, merged.stderr);
  const result = JSON.parse(merged.stdout);
  t.like(result, {
    teamId: id,
    certificateId: certificate.certificateId,
    protectedBranch: 'main',
    resultBranch: `orchard/team/${id}/result`,
    resultHead: certificate.result.head,
    before: mainAtStart,
    after: certificate.result.head,
    mode: 'fast_forward',
  });
  t.is(git(repo, 'rev-parse', 'main'), certificate.result.head);
  t.true(git(repo, 'merge-base', '--is-ancestor', git(repo, 'rev-parse', `orchard/${memberSessionId(id, 'implementer')}/work`), 'main') === '');
  t.deepEqual(git(repo, 'ls-tree', '--name-only', 'main').split('\n').sort(), ['README.md', 'evaluator.js', 'evaluator.test.js']);
  t.true(existsSync(join(repo, 'evaluator.test.js')), 'the main checkout follows');
  t.is(git(repo, 'status', '--porcelain'), '');

  const again = await orchard(['team', 'merge', id]);
  t.is(again.code, 0, again.stderr);
  t.is(
    again.stdout.trim(),
    `${id}: main fast-forwarded: ${mainAtStart.slice(0, 12)} → ${certificate.result.head.slice(0, 12)} (result orchard/team/${id}/result at ${certificate.result.head.slice(0, 12)}, certificate ${certificate.certificateId})`,
  );
  t.is(git(repo, 'rev-parse', 'main'), certificate.result.head);

  const ghost = await orchard(['team', 'merge', uniqueId('no-team')]);
  t.is(ghost.code, 2);
  t.regex(ghost.stderr, /^orchard: team_not_found: /);
});
