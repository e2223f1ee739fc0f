import test from 'ava';
import { git, makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

async function toolResults(sessionId: string): Promise<string[]> {
  const { rows } = await shared().pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' ORDER BY turn, step, ordinal`, [
    sessionId,
  ]);
  return rows.map((r) => r.content);
}

test('a bash call that leaves a conflicted merge gets the ownership rule and the exact abort command appended', async (t) => {
  const orchard = shared();
  const repo = makeRepo({ 'notes.txt': 'base\n' });
  const sessionId = uniqueId('conflict');
  git(repo, 'checkout', '-q', '-b', 'theirs');
  git(repo, 'commit', '-q', '-am', 'x', '--allow-empty');
  const scenario = writeScenario({
    name: 'conflict',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              {
                name: 'bash',
                arguments: {
                  command:
                    'git switch -q -c side && echo side > notes.txt && git commit -qam side && git switch -q - && ' +
                    'echo mine > notes.txt && git commit -qam mine && git merge side',
                },
              },
            ],
          },
          { tool_calls: [{ name: 'bash', arguments: { command: 'git merge --abort && git status --short' } }] },
          { content: 'done' },
        ],
      },
    ],
  });
  git(repo, 'checkout', '-q', 'main');
  await orchard.client.createSession({ sessionId, title: 'conflict', repo, model: { provider: 'scripted', scenario }, task: 'merge' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  const [conflicted, aborted] = await toolResults(sessionId);
  t.regex(conflicted, /git merge --abort/);
  t.regex(conflicted, /session send <owner-session-id>/);
  t.regex(conflicted, /notes\.txt/);
  t.notRegex(aborted, /git merge --abort/, 'after the abort there is nothing to annotate');
});

test('an isolated child running a script that moves another branch: the backstop hook keeps the ref in place', async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  git(repo, 'branch', 'other');
  const otherBefore = git(repo, 'rev-parse', 'other');
  const mainBefore = git(repo, 'rev-parse', 'main');
  const sessionId = uniqueId('isolated');
  const scenario = writeScenario({
    name: 'script',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              {
                name: 'write_file',
                arguments: {
                  path: 'build.sh',
                  content: 'echo x > f.txt\ngit add f.txt\ngit commit -qm f\ngit branch -f other HEAD\ngit update-ref refs/heads/main HEAD\n',
                },
              },
              { name: 'bash', arguments: { command: 'bash build.sh; echo exit=$?' } },
            ],
          },
          { content: 'done' },
        ],
      },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'isolated', repo, isolated: true, model: { provider: 'scripted', scenario }, task: 'build' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(git(repo, 'rev-parse', 'other'), otherBefore);
  t.is(git(repo, 'rev-parse', 'main'), mainBefore);
  // Its own branch did move: the commit in the script landed on orchard/<id>.
  t.is(git(repo, 'log', '-1', '--format=%s', `orchard/${sessionId}/work`), 'f');
});

test("an isolated child's bash is refused by the guard with a typed reason and nothing runs; plain text mentioning git is not", async (t) => {
  const orchard = shared();
  const repo = makeRepo();
  git(repo, 'branch', 'other');
  const otherBefore = git(repo, 'rev-parse', 'other');
  const sessionId = uniqueId('guarded');
  const scenario = writeScenario({
    name: 'guarded',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              { name: 'bash', arguments: { command: 'touch ran.txt && git branch -f other HEAD' } },
              { name: 'bash', arguments: { command: 'sh -c "git merge other"' } },
              { name: 'bash', arguments: { command: 'echo "git merge other" > said.txt && git status --short' } },
            ],
          },
          { content: 'done' },
        ],
      },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'guarded', repo, isolated: true, model: { provider: 'scripted', scenario }, task: 'try' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  const [branchForce, merge, echo] = await toolResults(sessionId);
  t.regex(branchForce, /Refused by the workspace guard \(\w+\)/);
  t.regex(merge, /Refused by the workspace guard \(integration_policy\)/);
  t.regex(echo, /exit code 0/);
  t.is(git(repo, 'rev-parse', 'other'), otherBefore);
  const { existsSync } = await import('node:fs');
  t.false(existsSync(`${view.worktree}/ran.txt`), 'a refused command runs no part of itself');
  t.true(existsSync(`${view.worktree}/said.txt`));
  const { rows } = await orchard.pool.query(`SELECT count(*)::int AS n FROM lease_process_groups WHERE worktree LIKE $1`, [`%/${sessionId}`]);
  t.is(rows[0].n, 1, 'only the allowed command spawned a process group');
});
