import test from 'ava';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ORCHARD_UNCONFINED } from '../../contract/search-attributes';
import { git, makeRepo, startOrchard, testConfinement, uniqueId, writeScenario, type TestOrchard } from '../helpers/orchard';

/**
 * Issue 10, deliverables 1 and 2 through a real session: an isolated child's bash runs in the sandbox (a script the
 * guard cannot read changes nothing outside the child's allowance), a host with ORCHARD_SANDBOX=off runs it with the
 * guard alone and marks the session unconfined (status and search attribute), and a host that cannot build the
 * sandbox refuses isolated children and says why.
 */

/** Writes everything a script might reach outside its worktree; each attempt's exit code is logged in the worktree. */
function attackScript(repo: string): string {
  return [
    `echo hijacked > ${repo}/README.md; echo "readme $?" >> attempts.log`,
    `printf '#!/bin/sh\\nexit 0\\n' > ${repo}/.git/hooks/pre-commit; echo "hook $?" >> attempts.log`,
    `echo '[core]' >> ${repo}/.git/config; echo "config $?" >> attempts.log`,
    'git update-ref refs/heads/main HEAD; echo "update-ref $?" >> attempts.log',
    'echo mine > own.txt && git add own.txt && git commit -qm own; echo "own $?" >> attempts.log',
    '',
  ].join('\n');
}

async function runAttack(orchard: TestOrchard, repo: string) {
  const sessionId = uniqueId('confined');
  const scenario = writeScenario({
    name: 'attack',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              { name: 'write_file', arguments: { path: 'attack.sh', content: attackScript(repo) } },
              { name: 'bash', arguments: { command: 'bash attack.sh; cat attempts.log' } },
            ],
          },
          { content: 'done' },
        ],
      },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'attack', repo, isolated: true, model: { provider: 'scripted', scenario }, task: 'build' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const { rows } = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' ORDER BY turn, step, ordinal`, [
    sessionId,
  ]);
  const handle = orchard.temporal.workflow.getHandle(`session/${sessionId}`);
  const unconfinedAttribute = (await handle.describe()).typedSearchAttributes.get(ORCHARD_UNCONFINED);
  return { sessionId, view, bashResult: String(rows[1]?.content ?? ''), unconfinedAttribute };
}

test("confined: a script the guard cannot read changes nothing outside the allowance; the child's own commit lands", async (t) => {
  const confinement = await testConfinement();
  if (confinement.mode !== 'sandbox') return t.fail(`this machine cannot confine: ${'reason' in confinement ? confinement.reason : ''}`);
  const orchard = await startOrchard(t, { confinement });
  const repo = makeRepo({ 'README.md': '# fixture\n' });
  const main = git(repo, 'rev-parse', 'main');
  const config = readFileSync(join(repo, '.git', 'config'), 'utf8');
  const { sessionId, view, bashResult, unconfinedAttribute } = await runAttack(orchard, repo);
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.confinement, 'confined');
  t.is(unconfinedAttribute, undefined);
  t.is(readFileSync(join(repo, 'README.md'), 'utf8'), '# fixture\n');
  t.false(existsSync(join(repo, '.git', 'hooks', 'pre-commit')));
  t.is(readFileSync(join(repo, '.git', 'config'), 'utf8'), config);
  t.is(git(repo, 'rev-parse', 'main'), main);
  t.is(git(repo, 'log', '-1', '--format=%s', `orchard/${sessionId}/work`), 'own');
  // Writes into the shared repository fail in the command itself (read-only); the own commit does not. (The
  // README write may "succeed": a checkout under /tmp is hidden by the private /tmp, so it lands there.)
  t.regex(bashResult, /hook [1-9]/);
  t.regex(bashResult, /config [1-9]/);
  t.regex(bashResult, /update-ref [1-9]/);
  t.regex(bashResult, /own 0/);
});

test('ORCHARD_SANDBOX=off: the guard alone refuses the script it cannot read, and the session says it is unconfined', async (t) => {
  const orchard = await startOrchard(t, { confinement: { mode: 'off', reason: 'ORCHARD_SANDBOX=off (test)' } });
  const repo = makeRepo({ 'README.md': '# fixture\n' });
  const { view, bashResult, unconfinedAttribute } = await runAttack(orchard, repo);
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.confinement, 'unconfined');
  t.is(unconfinedAttribute, true);
  // Confined, this script runs and the sandbox decides; with nothing under the guard it is refused instead.
  t.regex(bashResult, /^Refused by the workspace guard \(guard_cannot_judge\)/);
  t.is(readFileSync(join(repo, 'README.md'), 'utf8'), '# fixture\n');
});

test('a host that cannot build the sandbox refuses isolated children, saying why, and still runs other sessions', async (t) => {
  const orchard = await startOrchard(t, { confinement: { mode: 'unavailable', reason: 'bwrap not found (test)' } });
  const repo = makeRepo();
  const scenario = writeScenario({ name: 'noop', turns: [{ steps: [{ content: 'done' }] }] });
  // The create is accepted (it returns before the worktree exists); the session then fails at preparation.
  const refused = uniqueId('refused');
  await orchard.client.createSession({ sessionId: refused, title: 'x', repo, isolated: true, model: { provider: 'scripted', scenario }, task: 'x' });
  const view = await until(
    () => orchard.client.status(refused),
    (v) => v.error !== undefined,
  );
  t.is(view.error?.code, 'sandbox_unavailable');
  t.regex(view.error?.message ?? '', /bwrap not found \(test\)/);
  // No worktree was made for it.
  t.deepEqual(
    git(repo, 'worktree', 'list', '--porcelain')
      .split('\n')
      .filter((l) => l.startsWith('worktree ')).length,
    1,
  );
  const plain = uniqueId('plain');
  await orchard.client.createSession({ sessionId: plain, title: 'x', repo, model: { provider: 'scripted', scenario }, task: 'x' });
  t.is((await orchard.client.waitUntilSettled(plain, { afterTurn: 1 })).lastTurn?.outcome, 'finished');
});

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test('verification after every command: a change the sandbox lets through (HEAD, writable for a checkout of the own branch, pointed at main) is put back and holds the worktree until a user resolves it', async (t) => {
  const orchard = await startOrchard(t);
  const repo = makeRepo();
  const sessionId = uniqueId('held');
  const scenario = writeScenario({
    name: 'held',
    turns: [
      {
        steps: [
          {
            tool_calls: [
              // HEAD is read-only in the sandbox except for a command that checks out the own branch (which rewrites
              // HEAD); the script the guard cannot read uses that to point HEAD at main.
              { name: 'write_file', arguments: { path: 'hack.sh', content: 'git symbolic-ref HEAD refs/heads/main\n' } },
              { name: 'bash', arguments: { command: `git checkout -q orchard/${sessionId}/work && bash hack.sh; echo ran` } },
              { name: 'bash', arguments: { command: 'echo after > after.txt' } },
            ],
          },
          { content: 'held' },
        ],
      },
      { steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo resumed > resumed.txt' } }] }, { content: 'done' }] },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'held', repo, isolated: true, model: { provider: 'scripted', scenario }, task: 'one' });
  const held = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.true(held.held);
  const worktree = held.worktree!;
  const results = async () =>
    (
      await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' ORDER BY turn, step, ordinal`, [sessionId])
    ).rows.map((r) => String(r.content));
  const [, hacked, refused] = await results();
  // The tool result says exactly what changed: the child's HEAD, from its branch to main.
  t.regex(hacked, /VERIFICATION HOLD/);
  t.regex(hacked, new RegExp(`head .*HEAD.*ref: refs/heads/orchard/${sessionId}/work.* → .*ref: refs/heads/main; put back by Orchard`));
  t.regex(refused, /^error \(verification_hold\)/);
  t.false(existsSync(join(worktree, 'after.txt')), 'the command after the change did not run');
  const { rows } = await orchard.pool.query(`SELECT session_id, command, changes, resolved_at FROM verification_holds WHERE worktree LIKE $1`, [
    `%:${worktree}`,
  ]);
  t.is(rows.length, 1);
  t.is(rows[0].command, `git checkout -q orchard/${sessionId}/work && bash hack.sh; echo ran`);
  t.is(rows[0].resolved_at, null);
  t.deepEqual(
    rows[0].changes.map((c: { kind: string; change: string }) => [c.kind, c.change]),
    [['head', 'modified']],
  );

  // A send does not lift the hold: the command stays refused.
  // Orchard put HEAD back already; the user looks and resolves the hold; the next task's command runs.
  t.is(git(worktree, 'symbolic-ref', 'HEAD'), `refs/heads/orchard/${sessionId}/work`);
  const resolved = await orchard.client.resolveHold(sessionId, { by: 'tester', note: 'HEAD put back' });
  t.is(resolved.resolvedBy, 'tester');
  t.falsy((await orchard.client.status(sessionId)).held);
  await orchard.client.send(sessionId, 'two');
  await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(readFileSync(join(worktree, 'resumed.txt'), 'utf8'), 'resumed\n');
  // Nothing left to resolve: a typed refusal, and nothing changes.
  const again = await t.throwsAsync(orchard.client.resolveHold(sessionId));
  t.regex(again!.message, /no open verification hold/);
});
