import test from 'ava';
import { workerConfigFromEnv } from '../../worker/config';

/** ORCHARD_METRICS_PORT / ORCHARD_METRICS_HOST (docs/configuration.md): no endpoint unless set; a bad port stops the worker. */
const config = (env: NodeJS.ProcessEnv) => workerConfigFromEnv({ ORCHARD_HOST_ID: 'metrics-host', ...env }, '/tmp').metrics;

test('ORCHARD_METRICS_PORT: unset means no metrics endpoint; a port (and ORCHARD_METRICS_HOST) is taken as given; anything else stops the worker', (t) => {
  t.is(config({}), undefined);
  t.is(config({ ORCHARD_METRICS_PORT: ' ' }), undefined);
  t.deepEqual(config({ ORCHARD_METRICS_PORT: '9464' }), { port: 9464 });
  t.deepEqual(config({ ORCHARD_METRICS_PORT: '9464', ORCHARD_METRICS_HOST: '127.0.0.1' }), { port: 9464, host: '127.0.0.1' });
  for (const bad of ['0', '65536', '-1', '94.64', 'metrics']) {
    t.throws(() => config({ ORCHARD_METRICS_PORT: bad }), { message: /ORCHARD_METRICS_PORT must be a TCP port/ });
  }
});
