import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { TemporalConfigError, clientConnectionOptions, describeTarget, loadTemporalSettings, type TemporalTarget } from '../../client/connection';
import { nativeConnectionOptions } from '../../worker/runtime';

/** A temp dir holding a temporal.toml, and an environment that sees only it (no ~/.config of the machine). */
function configFile(toml: string): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-envconfig-'));
  writeFileSync(join(dir, 'temporal.toml'), toml);
  return { dir, env: { HOME: dir, TEMPORAL_CONFIG_FILE: join(dir, 'temporal.toml') } };
}

const TOML = `
[profile.default]
address = "temporal.internal:7233"
namespace = "agents"

[profile.cloud]
address = "agents.a1b2c.tmprl.cloud:7233"
namespace = "agents.a1b2c"
api_key = "secret-key"

[profile.mtls]
address = "temporal.prod:7233"
namespace = "prod"
[profile.mtls.tls]
server_name = "temporal.prod.internal"
server_ca_cert_data = "CA-PEM"
client_cert_data = "CERT-PEM"
client_key_data = "KEY-PEM"
[profile.mtls.grpc_meta]
x-team = "platform"
`;

test('nothing configured: no address (the embedded dev server is used) and the default namespace', (t) => {
  const home = mkdtempSync(join(tmpdir(), 'orchard-envconfig-home-'));
  t.deepEqual(loadTemporalSettings({ HOME: home }), { address: undefined, namespace: 'default' });
});

test('the default profile of TEMPORAL_CONFIG_FILE gives address and namespace, plaintext', (t) => {
  const { env } = configFile(TOML);
  t.deepEqual(loadTemporalSettings(env), { address: 'temporal.internal:7233', namespace: 'agents' });
});

test('TEMPORAL_PROFILE picks a profile; an API key implies TLS', (t) => {
  const { env } = configFile(TOML);
  const settings = loadTemporalSettings({ ...env, TEMPORAL_PROFILE: 'cloud' });
  t.deepEqual(settings, { address: 'agents.a1b2c.tmprl.cloud:7233', namespace: 'agents.a1b2c', tls: true, apiKey: 'secret-key' });
  // An explicit TEMPORAL_TLS=false wins over the implication (a TLS-terminating sidecar, say).
  t.is(loadTemporalSettings({ ...env, TEMPORAL_PROFILE: 'cloud', TEMPORAL_TLS: 'false' }).tls, false);
});

test('a TLS profile becomes server name, CA and client certificate pair, plus gRPC metadata', (t) => {
  const { env } = configFile(TOML);
  const settings = loadTemporalSettings({ ...env, TEMPORAL_PROFILE: 'mtls' });
  t.is(settings.address, 'temporal.prod:7233');
  t.is(settings.namespace, 'prod');
  t.deepEqual(settings.metadata, { 'x-team': 'platform' });
  const tls = settings.tls;
  if (typeof tls !== 'object') return t.fail(`expected a TLS config, got ${String(tls)}`);
  t.is(tls.serverNameOverride, 'temporal.prod.internal');
  t.is(Buffer.from(tls.serverRootCACertificate!).toString(), 'CA-PEM');
  t.is(Buffer.from(tls.clientCertPair!.crt).toString(), 'CERT-PEM');
  t.is(Buffer.from(tls.clientCertPair!.key).toString(), 'KEY-PEM');
});

test('TLS certificate paths and TEMPORAL_TLS_* variables are read like the Temporal CLI reads them', (t) => {
  const { dir, env } = configFile('[profile.unused]\naddress = "unused:7233"\n');
  writeFileSync(join(dir, 'ca.pem'), 'CA-FROM-FILE');
  const settings = loadTemporalSettings({
    ...env,
    TEMPORAL_ADDRESS: 'temporal.tls:7233',
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: join(dir, 'ca.pem'),
    TEMPORAL_TLS_SERVER_NAME: 'frontend',
  });
  const tls = settings.tls;
  if (typeof tls !== 'object') return t.fail(`expected a TLS config, got ${String(tls)}`);
  t.is(Buffer.from(tls.serverRootCACertificate!).toString(), 'CA-FROM-FILE');
  t.is(tls.serverNameOverride, 'frontend');
});

test('environment variables override the profile; an empty one counts as unset', (t) => {
  const { env } = configFile(TOML);
  t.deepEqual(loadTemporalSettings({ ...env, TEMPORAL_ADDRESS: '127.0.0.1:7999', TEMPORAL_NAMESPACE: 'ci' }), {
    address: '127.0.0.1:7999',
    namespace: 'ci',
  });
  t.deepEqual(loadTemporalSettings({ ...env, TEMPORAL_ADDRESS: '', TEMPORAL_NAMESPACE: '' }), {
    address: 'temporal.internal:7233',
    namespace: 'agents',
  });
  t.deepEqual(loadTemporalSettings({ ...env, TEMPORAL_GRPC_META_X_TENANT: 'blue' }).metadata, { 'x-tenant': 'blue' });
});

test('a profile that does not exist and a file that is not TOML are typed configuration errors', (t) => {
  const { env } = configFile(TOML);
  const missing = t.throws(() => loadTemporalSettings({ ...env, TEMPORAL_PROFILE: 'staging' }), { instanceOf: TemporalConfigError });
  t.is(missing?.code, 'temporal_config_invalid');
  t.regex(missing?.message ?? '', /profile staging.*'staging' not found/);
  const broken = configFile('[profile.default\naddress = ');
  t.throws(() => loadTemporalSettings(broken.env), { instanceOf: TemporalConfigError });
});

test('the connection options carry address, TLS, API key and metadata; the log line never shows the key', (t) => {
  const target: TemporalTarget = { address: 'a:7233', namespace: 'n', tls: true, apiKey: 'k-123', metadata: { 'x-a': 'b' } };
  const expected = { address: 'a:7233', tls: true, apiKey: 'k-123', metadata: { 'x-a': 'b' } };
  t.deepEqual(nativeConnectionOptions(target), expected);
  t.deepEqual(clientConnectionOptions(target), expected);
  t.is(describeTarget(target), 'a:7233 (namespace n, TLS, API key)');
  t.false(describeTarget(target).includes('k-123'));
});
