import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { buildCommandEnv } from '../../activities/bash/env';
import { fullScanCount, SHARED_SCAN_INTERVAL_MS, sharedProcessScanner } from '../../activities/bash/process-tree';
import { runBash } from '../../activities/bash/runner';

// One test per file on purpose: it counts every full /proc scan of this process (ava runs each file in its own
// process), so nothing else may run beside it.
const root = mkdtempSync(path.join(tmpdir(), 'orchard-scanner-'));
test.after.always(() => rmSync(root, { recursive: true, force: true }));
const env = buildCommandEnv({ worktree: root, sessionId: 'scan', branch: 'orchard/scan' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts `count` commands of `seconds`, waits until all passed the gate, and counts full scans over `windowMs`. */
async function scansWhileRunning(count: number, windowMs: number): Promise<number> {
  let started = 0;
  const runs = Array.from({ length: count }, () =>
    runBash({
      command: 'sleep 3',
      cwd: root,
      env,
      timeoutMs: 20_000,
      maxOutputBytes: 1024,
      onSpawn: () => {
        started++;
      },
    }),
  );
  while (started < count) await sleep(10);
  await sleep(300); // past the gates and the first scans: only steady-state scanning is counted
  const before = fullScanCount();
  await sleep(windowMs);
  const scans = fullScanCount() - before;
  const results = await Promise.all(runs);
  for (const r of results) if (r.exitCode !== 0) throw new Error(`a command failed: ${JSON.stringify(r)}`);
  return scans;
}

test('running commands share one /proc scan per interval: the scan rate does not grow with the number of commands, and stops when none runs', async (t) => {
  const windowMs = 2000;
  const perWindow = windowMs / SHARED_SCAN_INTERVAL_MS; // 10
  const one = await scansWhileRunning(1, windowMs);
  const three = await scansWhileRunning(3, windowMs);
  t.log(`full scans in ${windowMs} ms: 1 command ${one}, 3 commands ${three} (interval ${SHARED_SCAN_INTERVAL_MS} ms)`);
  // One scan per interval however many commands run (a scan per command would make it three times as many).
  t.true(one >= perWindow - 3 && one <= perWindow + 2, `1 command: ${one}`);
  t.true(three <= perWindow + 2, `3 commands: ${three} scans, one per command per interval would be about ${3 * perWindow}`);

  // Nothing runs: the scanner has no subscriber and scans nothing.
  t.is(sharedProcessScanner().subscribers, 0);
  const idle = fullScanCount();
  await sleep(4 * SHARED_SCAN_INTERVAL_MS);
  t.is(fullScanCount() - idle, 0);
});
