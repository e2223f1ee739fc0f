import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import test from 'ava';
import { testStackEnv } from '../helpers/orchard';

/**
 * Kept histories replayed against the current workflow bundle: a change that would make a running
 * session non-deterministic fails here instead of in production.
 */
const dir = join(__dirname, 'histories');
const files = readdirSync(dir).filter((f) => f.endsWith('.json'));

test('there are recorded histories to replay', (t) => {
  t.true(files.length > 0);
});

for (const file of files) {
  test(`replays ${file} without non-determinism`, async (t) => {
    const history = historyFromJSON(JSON.parse(readFileSync(join(dir, file), 'utf8')));
    const bundle = testStackEnv().workflowBundle;
    await t.notThrowsAsync(Worker.runReplayHistory(bundle ? { workflowBundle: bundle } : { workflowsPath: require.resolve('../../workflows') }, history, file));
  });
}
