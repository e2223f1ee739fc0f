import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import test from 'ava';
import { runTool } from '../../activities/tools/run-tool';

test('a bash command whose process group cannot be recorded is refused command_not_started, and none of it runs', async (t) => {
  const worktree = mkdtempSync(path.join(tmpdir(), 'orchard-not-started-'));
  const file = path.join(worktree, 'ran');
  const result = await runTool('bash', JSON.stringify({ command: `touch ${file}` }), {
    sessionId: 'not-started',
    worktree,
    branch: 'orchard/not-started/work',
    isolated: false,
    bashTimeoutMs: 10_000,
    maxOutputBytes: 10_000,
    signal: new AbortController().signal,
    onTick: () => undefined,
    beforeSideEffect: async () => undefined,
    // The store that records the group is away: the command must not start unrecorded.
    onSpawn: async () => {
      throw new Error('database unavailable');
    },
  });
  t.false(result.ok);
  t.regex(result.content, /^error \(command_not_started\): the command did not start \(.*database unavailable.*\); none of it ran/);
  t.false(existsSync(file));
});
