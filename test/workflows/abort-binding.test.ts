import test from 'ava';
import { abortBindingOf } from '../../activities/index';
import { OrchardClient } from '../../client/client';
import { testStackEnv, uniqueId } from '../helpers/orchard';

/**
 * The Temporal SDK adds an abort listener to the bound signal for every call and never removes it: an activity that
 * asks Temporal more than ten times under its attempt's signal (a yield polling a session's liveness) made Node print
 * a MaxListenersExceededWarning on every attempt.
 */
test('an activity that asks Temporal many times under its cancellation signal raises no leak warning', async (t) => {
  const env = testStackEnv();
  const client = await OrchardClient.connect({ address: env.temporalAddress, namespace: env.namespace, taskQueue: 'orchard' });
  t.teardown(() => client.close());
  const bind = abortBindingOf({ temporal: () => client })!;
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  process.on('warning', onWarning);
  t.teardown(() => process.off('warning', onWarning));
  const attempt = new AbortController();
  const sessionId = uniqueId('no-such-session');
  const answers = await bind(attempt.signal, async () => {
    const seen: string[] = [];
    for (let i = 0; i < 15; i++) seen.push((await client.sessionLiveness(sessionId)).liveness);
    return seen;
  });
  t.deepEqual(new Set(answers), new Set(['dead']));
  // A warning is emitted on the next tick.
  await new Promise((r) => setTimeout(r, 50));
  t.deepEqual(
    warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message),
    [],
  );
});
