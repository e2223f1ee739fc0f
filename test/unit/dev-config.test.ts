import path from 'node:path';
import test from 'ava';
import { DevConfigError, devServerArgs, loadDevConfig, parseDevConfig } from '../../worker/dev-server';

const projectRoot = path.resolve(__dirname, '..', '..');
const parse = (text: string) => parseDevConfig(text, { file: 'temporal-dev.yaml', projectRoot: '/proj' });

test('the project temporal-dev.yaml becomes the start-dev argv', (t) => {
  const config = loadDevConfig(projectRoot);
  t.deepEqual(devServerArgs(config), [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    '7233',
    '--ui-port',
    '8233',
    '--namespace',
    'default',
    '--db-filename',
    path.join(projectRoot, '.orchard', 'temporal.db'),
    '--log-level',
    'warn',
    '--search-attribute',
    'OrchardKind=Keyword',
    '--search-attribute',
    'OrchardStatus=Keyword',
    '--search-attribute',
    'OrchardParent=Keyword',
    '--search-attribute',
    'OrchardHost=Keyword',
    '--search-attribute',
    'OrchardHandoffSloMissed=Bool',
    '--search-attribute',
    'OrchardUnconfined=Bool',
    '--dynamic-config-value',
    'frontend.enableUpdateWorkflowExecution=true',
    '--dynamic-config-value',
    'frontend.enableUpdateWorkflowExecutionAsyncAccepted=true',
    '--dynamic-config-value',
    'system.forceSearchAttributesCacheRefreshOnRead=true',
    '--dynamic-config-value',
    'history.transferProcessorMaxPollRPS=200',
  ]);
});

test('the project temporal-dev.yaml registers exactly the Orchard attributes: four keywords and two bools', (t) => {
  t.deepEqual(loadDevConfig(projectRoot).searchAttributes, {
    OrchardKind: 'Keyword',
    OrchardStatus: 'Keyword',
    OrchardParent: 'Keyword',
    OrchardHost: 'Keyword',
    OrchardHandoffSloMissed: 'Bool',
    OrchardUnconfined: 'Bool',
  });
});

test('headless, in-memory overrides drop --ui-port and --db-filename', (t) => {
  const args = devServerArgs({ ...loadDevConfig(projectRoot, { ui: false, dbFile: null }), port: 7300 });
  t.true(args.includes('--headless'));
  t.false(args.includes('--ui-port'));
  t.false(args.includes('--db-filename'));
});

test('dynamic config values are passed as JSON', (t) => {
  const config = parse('port: 7000\ndynamicConfig:\n  a.string: hello\n  a.number: 5\n  a.list: [1, "x"]\n');
  const values = devServerArgs(config).filter((_, i, all) => all[i - 1] === '--dynamic-config-value');
  t.deepEqual(values, ['a.string="hello"', 'a.number=5', 'a.list=[1,"x"]']);
});

test('a relative dbFile is resolved against the project root', (t) => {
  t.is(parse('dbFile: data/t.db').dbFile, path.resolve('/proj', 'data/t.db'));
  t.is(parse('dbFile: /abs/t.db').dbFile, '/abs/t.db');
  t.is(parse('dbFile: null').dbFile, null);
});

test('port 0 must be resolved before building argv', (t) => {
  t.throws(() => devServerArgs(parse('port: 0')), { message: /concrete ports/ });
});

for (const [name, text, problem] of [
  ['invalid YAML', 'port: [7233\n', /temporal-dev\.yaml/],
  ['a list at the top level', '- port: 1\n', /top level must be a mapping/],
  ['an unknown key', 'prot: 7233\n', /Unrecognized key/],
  ['a port out of range', 'port: 70000\n', /port:/],
  ['an unknown search attribute type', 'searchAttributes:\n  OrchardKind: Keywrd\n', /searchAttributes\.OrchardKind/],
  ['a search attribute name that is no identifier', 'searchAttributes:\n  Orchard-Kind: Keyword\n', /searchAttributes/],
  [
    'more Text attributes than the SQLite store has slots',
    'searchAttributes:\n  A: Text\n  B: Text\n  C: Text\n  D: Text\n',
    /4 Text attributes, but .* only 3/,
  ],
  ['an invalid log level', 'logLevel: loud\n', /logLevel/],
] as const) {
  test(`a temporal-dev.yaml with ${name} is a DevConfigError`, (t) => {
    const err = t.throws(() => parse(text), { instanceOf: DevConfigError });
    t.is(err?.code, 'dev_config_invalid');
    t.regex(err?.message ?? '', problem);
    t.true((err?.problems.length ?? 0) > 0);
  });
}

test('a missing temporal-dev.yaml is a DevConfigError naming the file', (t) => {
  const err = t.throws(() => loadDevConfig('/nonexistent-orchard-root'), { instanceOf: DevConfigError });
  t.regex(err?.message ?? '', /nonexistent-orchard-root\/temporal-dev\.yaml: cannot read it \(ENOENT\)/);
});

test('ORCHARD_TEMPORAL_PORT and ORCHARD_UI_PORT set the embedded server ports over the file; ORCHARD_UI_PORT=off runs it headless', (t) => {
  const config = loadDevConfig(projectRoot, undefined, { ORCHARD_TEMPORAL_PORT: '17233', ORCHARD_UI_PORT: '18233' });
  t.like(config, { port: 17233, ui: true, uiPort: 18233 });
  const args = devServerArgs(config);
  t.is(args[args.indexOf('--port') + 1], '17233');
  t.is(args[args.indexOf('--ui-port') + 1], '18233');
  const headless = devServerArgs(loadDevConfig(projectRoot, undefined, { ORCHARD_UI_PORT: 'off' }));
  t.true(headless.includes('--headless'));
  t.false(headless.includes('--ui-port'));
  // Explicit overrides (tests) still win over the environment.
  t.is(loadDevConfig(projectRoot, { port: 0 }, { ORCHARD_TEMPORAL_PORT: '17233' }).port, 0);
});

test('a port setting that is no port is a DevConfigError naming the variable, before anything starts', (t) => {
  const err = t.throws(() => loadDevConfig(projectRoot, undefined, { ORCHARD_TEMPORAL_PORT: '72330', ORCHARD_UI_PORT: 'eight' }), {
    instanceOf: DevConfigError,
  });
  t.regex(err?.message ?? '', /ORCHARD_TEMPORAL_PORT="72330" is not a port/);
  t.regex(err?.message ?? '', /ORCHARD_UI_PORT="eight" is not a port/);
});
