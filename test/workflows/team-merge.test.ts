import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import type { RunCompletionCertificate } from '../../activities/store/team';
import { OrchardError } from '../../client/client';
import { teamWorkflowId, type TeamStatusView } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { calls, final, gate } from '../helpers/fleet-model';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { git, makeRepo, startOrchard, uniqueId, type TestOrchard } from '../helpers/orchard';
import { untilTeam } from '../helpers/team';

/**
 * Protected branch by mechanism (issue 9, deliverable 8), against the real dev server, Postgres, git and bash; only
 * the model is played over HTTP. Members work on their own branches and try to move `main` every way they can;
 * the Coordinator tries tools that would reach git; the run's result is a branch bound to its certificate; only
 * the user's `team merge`, after delivery, moves `main`.
 */
const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const agentOf = (body: any) => /^You are (\S+),/.exec(String(body.messages[0].content))?.[1];
/** Tool results since the last user message (a member's step within its task). */
const stepOf = (body: any) => {
  const messages: any[] = body.messages;
  return messages.slice(messages.map((m) => m.role).lastIndexOf('user') + 1).filter((m) => m.role === 'tool').length;
};
const lastUser = (body: any) => String(body.messages.filter((m: any) => m.role === 'user').at(-1)?.content ?? '');
const bash = (command: string) => calls(['bash', { command }]);

/** Every way a member's bash might move `main`, run from a script (past the guard, for the ref backstop): each exit code is logged. */
const ATTACK = [
  'git branch -f main HEAD; echo "branch -f $?" >> attempts.log',
  'git update-ref refs/heads/main HEAD; echo "update-ref $?" >> attempts.log',
  'git push -q . HEAD:main; echo "push $?" >> attempts.log',
  'own=$(git symbolic-ref --short HEAD)',
  'git checkout -q --ignore-other-worktrees main && git commit -q --allow-empty -m hijack; echo "checkout+commit $?" >> attempts.log',
  'git checkout -q "$own"',
  '',
].join('\n');

/** The same attempts typed at the bash tool (the guard reads them). */
const TYPED = [
  'git branch -f main HEAD',
  'git update-ref refs/heads/main HEAD',
  'git push . HEAD:main',
  'git checkout main && git commit --allow-empty -m hijack',
];

interface Script {
  /** The Coordinator's goal turn: tasks to create (and a try at git). */
  tasks: { taskId: string; owner: string; description: string }[];
  /** What each member does, step by step, given its request. */
  member: (agent: string, step: number, body: any) => Reply | Promise<Reply>;
}

async function startTeam(t: import('ava').ExecutionContext, script: Script) {
  const teamId = uniqueId('team-merge');
  const repo = makeRepo();
  const stub = await stubModel(t, (body) => {
    if (!isCoordinator(body)) return script.member(agentOf(body) ?? '?', stepOf(body), body);
    const text = lastUser(body);
    const results = stepOf(body);
    if (text.startsWith('Build')) {
      if (results > 0) return final('Plan approved.');
      return calls(
        // Tools that would reach git: not the Coordinator's.
        ['bash', { command: `git -C ${repo} commit -q --allow-empty -m coordinator && git -C ${repo} branch -f main HEAD` }],
        ['git_commit', { message: 'coordinator', paths: ['README.md'] }],
        ...script.tasks.map((task): [string, unknown] => [
          'task_create',
          { taskId: task.taskId, title: task.taskId, description: task.description, owner: task.owner },
        ]),
        ['plan_approve', {}],
      );
    }
    if (text === 'add work') {
      if (results > 0) return final('Work answered.');
      return calls(['task_create', { taskId: 'more', title: 'more', description: 'after delivery', owner: script.tasks[0].owner }]);
    }
    if (text.includes('completion_candidate.state is ready') || text === 'certify again') {
      if (results > 0) return final('Completion answered.');
      return calls(['org_run_complete', { summary: 'The work is on the result branch.' }]);
    }
    return final('Noted.');
  });
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const mainAtStart = git(repo, 'rev-parse', 'main');
  await orchard.client.startTeam({
    teamId,
    repo,
    goal: 'Build an evaluator with tests',
    members: [...new Set(script.tasks.map((task) => task.owner))].map((memberId) => ({ memberId, role: memberId[0].toUpperCase() + memberId.slice(1) })),
  });
  return { orchard, teamId, repo, mainAtStart };
}

const until = (orchard: TestOrchard, teamId: string, what: string, probe: (v: TeamStatusView) => boolean) => untilTeam(orchard, teamId, what, probe, 120_000);

const refusedWith = async (t: import('ava').ExecutionContext, call: Promise<unknown>, code: OrchardError['code']) => {
  const err = await t.throwsAsync(call);
  t.true(err instanceof OrchardError, String(err));
  t.is((err as OrchardError).code, code, err?.message);
};

const certificates = async (orchard: TestOrchard, teamId: string): Promise<RunCompletionCertificate[]> =>
  (await orchard.pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [teamId])).rows.map((r) => r.certificate);
const tree = (repo: string, rev: string) => git(repo, 'ls-tree', '-r', '--name-only', rev).split('\n').sort();

test('members cannot move main; the delivered result is a branch bound to the certificate; only the user merge moves main, once', async (t) => {
  t.timeout(300_000);
  const hold = gate();
  const { orchard, teamId, repo, mainAtStart } = await startTeam(t, {
    tasks: [
      { taskId: 'implement', owner: 'implementer', description: 'Write impl.js and commit it.' },
      { taskId: 'test', owner: 'tester', description: 'Write impl.test.js and commit it.' },
      { taskId: 'review', owner: 'reviewer', description: 'Write review notes.' },
    ],
    member: async (agent, step) => {
      if (agent === 'implementer') {
        if (step === 0) await hold.promise;
        const plan = [
          () => bash(`printf 'module.exports = 1;\\n' > impl.js && git add impl.js && git commit -qm "impl.js"`),
          ...TYPED.map((command) => () => bash(command)),
          () => calls(['write_file', { path: 'attack.sh', content: ATTACK }]),
          () => bash('bash attack.sh; cat attempts.log'),
        ];
        return plan[step]?.() ?? completion({ content: 'implemented' });
      }
      if (agent === 'tester')
        return step === 0
          ? bash(`printf 'test\\n' > impl.test.js && git add impl.test.js && git commit -qm "impl.test.js"`)
          : completion({ content: 'tested' });
      // The reviewer leaves its work uncommitted: it is not evidence.
      return step === 0 ? calls(['write_file', { path: 'notes.md', content: 'looks fine\n' }]) : completion({ content: 'reviewed' });
    },
  });

  // Before delivery the merge is refused before anything runs, and main stays where it is.
  await refusedWith(t, orchard.client.mergeTeam(teamId), 'not_delivered');
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart);
  // Refused by the validator: the update never reached history.
  const history = await orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).fetchHistory();
  t.false(history.events!.some((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'mergeTeam'));
  hold.open();

  const delivered = await until(orchard, teamId, 'delivered', (v) => v.status === 'delivered');
  // The Coordinator's git attempts were refused; nothing reached the repository.
  t.deepEqual(delivered.refusals.slice(0, 2), [
    { tool: 'bash', code: 'tool_not_allowed' },
    { tool: 'git_commit', code: 'tool_not_allowed' },
  ]);
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart, 'no member and no Coordinator moved main');
  t.is(
    git(repo, 'log', '--all', '--format=%s')
      .split('\n')
      .filter((s) => s === 'hijack' || s === 'coordinator').length,
    0,
  );

  // The member's attempts really ran (its branch moved past main, so each would have changed main) and each failed.
  const implementerBranch = `orchard/${memberSessionId(teamId, 'implementer')}/work`;
  const implementerHead = git(repo, 'rev-parse', implementerBranch);
  t.not(implementerHead, mainAtStart);
  const worktree = (await orchard.client.status(memberSessionId(teamId, 'implementer'))).worktree!;
  const attempts = readFileSync(join(worktree, 'attempts.log'), 'utf8').trim().split('\n');
  t.deepEqual(
    attempts.map((line) => line.replace(/ \d+$/, '')),
    ['branch -f', 'update-ref', 'push', 'checkout+commit'],
  );
  t.log(attempts.join('; '));
  t.true(
    attempts.every((line) => !line.endsWith(' 0')),
    attempts.join('; '),
  );
  t.is(git(worktree, 'rev-parse', '--abbrev-ref', 'HEAD'), implementerBranch);

  // Evidence binds code: each output records its member branch's head; uncommitted work is not in it.
  const outputs = (await orchard.pool.query('SELECT task_id, commit_sha FROM team_task_outputs WHERE team_id = $1 ORDER BY task_id', [teamId])).rows;
  t.deepEqual(outputs, [
    { task_id: 'implement', commit_sha: implementerHead },
    { task_id: 'review', commit_sha: mainAtStart },
    { task_id: 'test', commit_sha: git(repo, 'rev-parse', `orchard/${memberSessionId(teamId, 'tester')}/work`) },
  ]);

  // The result: a branch at the commit the certificate names, with the members' committed files.
  const [certificate] = await certificates(orchard, teamId);
  const result = certificate.result!;
  t.is(result.branch, `orchard/team/${teamId}/result`);
  t.is(result.base, mainAtStart);
  t.is(git(repo, 'rev-parse', result.branch), result.head);
  t.deepEqual(tree(repo, result.head), ['README.md', 'impl.js', 'impl.test.js']);
  t.like(delivered.certificate, { certificateId: certificate.certificateId, resultBranch: result.branch, resultHead: result.head });

  // Certifying again is the same certificate and the same head, and puts back a result branch that was deleted.
  git(repo, 'branch', '-D', result.branch);
  await orchard.client.teamMessage(teamId, { text: 'certify again' });
  await until(orchard, teamId, 'the second certification', (v) => v.turns.length > delivered.turns.length && v.status === 'delivered');
  t.deepEqual(await certificates(orchard, teamId), [certificate]);
  t.is(git(repo, 'rev-parse', result.branch), result.head);

  // A dirty main checkout is refused, and keeps its change; main does not move.
  writeFileSync(join(repo, 'README.md'), '# edited by the user\n');
  await refusedWith(t, orchard.client.mergeTeam(teamId), 'checkout_dirty');
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart);
  t.is(readFileSync(join(repo, 'README.md'), 'utf8'), '# edited by the user\n');
  git(repo, 'checkout', '--', 'README.md');

  // The user committed on main since certification: the merge is one merge commit, and the checkout follows.
  writeFileSync(join(repo, 'CHANGELOG.md'), 'user work\n');
  git(repo, 'add', 'CHANGELOG.md');
  git(repo, 'commit', '-q', '-m', 'user work');
  const userHead = git(repo, 'rev-parse', 'main');
  const merged = await orchard.client.mergeTeam(teamId);
  t.like(merged, {
    teamId,
    certificateId: certificate.certificateId,
    protectedBranch: 'main',
    resultBranch: result.branch,
    resultHead: result.head,
    before: userHead,
    mode: 'merge_commit',
  });
  t.is(git(repo, 'rev-parse', 'main'), merged.after);
  t.deepEqual(git(repo, 'rev-list', '--parents', '-n', '1', 'main').split(' ').slice(1), [userHead, result.head]);
  t.deepEqual(tree(repo, 'main'), ['CHANGELOG.md', 'README.md', 'impl.js', 'impl.test.js']);
  t.true(existsSync(join(repo, 'impl.test.js')), 'the checkout has the merged files');
  t.is(git(repo, 'status', '--porcelain'), '');

  // A second merge answers the same and changes nothing: no second merge commit, one user event, one fact.
  const commits = git(repo, 'rev-list', '--count', 'main');
  t.deepEqual(await orchard.client.mergeTeam(teamId), merged);
  t.is(git(repo, 'rev-parse', 'main'), merged.after);
  t.is(git(repo, 'rev-list', '--count', 'main'), commits);
  const events = (await orchard.pool.query(`SELECT event_id, kind FROM team_user_events WHERE team_id = $1 AND kind = 'merge'`, [teamId])).rows;
  t.deepEqual(events, [{ event_id: merged.eventId, kind: 'merge' }]);
  const facts = (await orchard.pool.query(`SELECT actor, detail FROM team_facts WHERE team_id = $1 AND kind = 'team_merged'`, [teamId])).rows;
  t.is(facts.length, 1);
  t.like(facts[0], { actor: `user:${merged.eventId}`, detail: { before: userHead, after: merged.after, mode: 'merge_commit' } });

  // The generation is delivered: a completion request after later facts (the merge) answers the same certificate,
  // and the result branch stays where it names; new work is refused and changes nothing.
  const before = await orchard.client.teamStatus(teamId);
  await orchard.client.teamMessage(teamId, { text: 'certify again' });
  const again = await until(orchard, teamId, 'the certification after the merge', (v) => v.turns.length > before.turns.length && v.status === 'delivered');
  t.deepEqual(await certificates(orchard, teamId), [certificate]);
  t.is(again.certificate!.certificateId, certificate.certificateId);
  t.is(git(repo, 'rev-parse', result.branch), result.head);
  await orchard.client.teamMessage(teamId, { text: 'add work' });
  const added = await until(orchard, teamId, 'new work answered', (v) => v.turns.length > again.turns.length && v.status === 'delivered');
  t.deepEqual(added.refusals.at(-1), { tool: 'task_create', code: 'run_delivered' });
  t.is((await orchard.pool.query(`SELECT count(*)::int AS n FROM team_tasks WHERE team_id = $1`, [teamId])).rows[0].n, 3);
  t.is((await orchard.pool.query(`SELECT count(*)::int AS n FROM team_facts WHERE team_id = $1 AND kind = 'task_created'`, [teamId])).rows[0].n, 3);
});

test('members whose commits conflict get no delivery: the completion is refused merge_conflict, no certificate, no result branch', async (t) => {
  t.timeout(240_000);
  const { orchard, teamId, repo, mainAtStart } = await startTeam(t, {
    tasks: [
      { taskId: 'left', owner: 'implementer', description: 'Write shared.txt one way.' },
      { taskId: 'right', owner: 'tester', description: 'Write shared.txt another way.' },
    ],
    member: (agent, step) =>
      step === 0 ? bash(`printf '${agent}\\n' > shared.txt && git add shared.txt && git commit -qm "${agent}: shared.txt"`) : completion({ content: 'done' }),
  });
  const refused = await until(
    orchard,
    teamId,
    'the completion refused',
    (v) => v.refusals.some((r) => r.tool === 'org_run_complete') && v.status === 'waiting_for_org_event',
  );
  t.deepEqual(
    refused.refusals.find((r) => r.tool === 'org_run_complete'),
    { tool: 'org_run_complete', code: 'merge_conflict' },
  );
  t.is(refused.certificate, undefined);
  t.deepEqual(await certificates(orchard, teamId), []);
  t.throws(() => git(repo, 'rev-parse', '--verify', '--quiet', `orchard/team/${teamId}/result`));
  await refusedWith(t, orchard.client.mergeTeam(teamId), 'not_delivered');
  t.is(git(repo, 'rev-parse', 'main'), mainAtStart);
});
