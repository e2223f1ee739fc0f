import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { buildCommandEnv, sessionHomeDir } from '../../activities/bash/env';
import { runBash } from '../../activities/bash/runner';
import { makeRepo } from '../helpers/orchard';

test('git in an agent command reads no global config: a ~/.gitconfig planted in the session HOME runs nothing', async (t) => {
  const worktree = makeRepo();
  const env = buildCommandEnv({ worktree, sessionId: 's1', branch: 'main' });
  const home = sessionHomeDir(worktree, 's1');
  mkdirSync(home, { recursive: true });
  const pwned = join(mkdtempSync(join(tmpdir(), 'orchard-pwned-')), 'pwned');
  writeFileSync(join(home, '.gitconfig'), `[alias]\n\tst = !touch ${pwned}\n[core]\n\tfsmonitor = touch ${pwned}\n`);
  t.is(env.HOME, home);
  const result = await runBash({ command: 'git st; git status --short', cwd: worktree, env, timeoutMs: 10_000, maxOutputBytes: 4096 });
  t.regex(result.stderr, /'st' is not a git command/);
  t.false(existsSync(pwned));
});
