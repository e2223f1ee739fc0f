import test from 'ava';
import { startOrchestratorProblem } from '../../contract/messages';
import fc from 'fast-check';
import { MAX_ROUTING_ALIAS_CHARS, MAX_ROUTING_ALIASES, MAX_ROUTING_DESCRIPTION_CHARS } from '../../workflows/orchestrator/descriptions';
import { MAX_AGENT_CHARS, MAX_TITLE_CHARS, MAX_TOPIC_CHARS, dispatchRequestId, parseSessionCall } from '../../workflows/orchestrator/session-call';
import { ORCHESTRATOR_TOOLS } from '../../workflows/orchestrator/tools';

const cases: [string, unknown, unknown][] = [
  [
    'a well-formed send',
    { operation: 'send', args: { sessionID: 'pr-1741', task: 'rerun CI' } },
    { operation: 'send', sessionID: 'pr-1741', task: 'rerun CI' },
  ],
  [
    'sessionID and task at the top level',
    { operation: 'send', sessionID: 'pr-1741', task: 'rerun CI' },
    { operation: 'send', sessionID: 'pr-1741', task: 'rerun CI' },
  ],
  ['no operation, an id and a task', { sessionID: 'pr-1741', task: 'rerun CI' }, { operation: 'send', sessionID: 'pr-1741', task: 'rerun CI' }],
  ['sessionId spelled differently', { operation: 'send', args: { sessionId: 'pr-1741', task: 'x' } }, { operation: 'send', sessionID: 'pr-1741', task: 'x' }],
  ['a JSON string', '{"operation":"status","args":{"sessionID":"a"}}', { operation: 'status', sessionID: 'a' }],
  ['list', { operation: 'list', args: {} }, { operation: 'list' }],
  [
    'a create',
    { operation: 'create', args: { title: 'PR 1741', task: 'fix it', topic: 'PR 1741' } },
    {
      operation: 'create',
      title: 'PR 1741',
      task: 'fix it',
      topic: 'PR 1741',
      agent: undefined,
      routingDescription: undefined,
      routingAliases: undefined,
      completion: { policy: 'each' },
    },
  ],
];

const create = (extra: Record<string, unknown>) => ({ operation: 'create', args: { title: 't', task: 'x', ...extra } });
const completions: [string, Record<string, unknown>, unknown][] = [
  ['no completion fields', {}, { policy: 'each' }],
  ['completionPolicy each', { completionPolicy: 'each' }, { policy: 'each' }],
  ['notifyOnComplete', { notifyOnComplete: true }, { policy: 'each' }],
  ['triggerTurnOnComplete', { triggerTurnOnComplete: false }, { policy: 'each' }],
  ['a group', { completionPolicy: 'group', completionGroupId: ' review ' }, { policy: 'group', groupId: 'review' }],
  ['a group id alone', { completionGroupId: 'review' }, { policy: 'group', groupId: 'review' }],
];
for (const [name, extra, completion] of completions) {
  test(`a create with ${name} has completion ${JSON.stringify(completion)}`, (t) => {
    const parsed = parseSessionCall(create(extra));
    t.true(parsed.ok, JSON.stringify(parsed));
    if (parsed.ok && parsed.call.operation === 'create') t.deepEqual(parsed.call.completion, completion);
  });
}
const badCompletions: [string, Record<string, unknown>][] = [
  ['a group without an id', { completionPolicy: 'group' }],
  ['an id with policy each', { completionPolicy: 'each', completionGroupId: 'g' }],
  ['an unknown policy', { completionPolicy: 'all' }],
  ['notifyOnComplete with a group', { completionGroupId: 'g', notifyOnComplete: true }],
  ['a non-boolean notifyOnComplete', { notifyOnComplete: 'yes' }],
  ['an empty group id', { completionGroupId: '  ' }],
];
for (const [name, extra] of badCompletions) {
  test(`a create with ${name} is refused`, (t) => {
    const parsed = parseSessionCall(create(extra));
    t.false(parsed.ok);
    if (!parsed.ok) t.is(parsed.code, 'session_call_invalid');
  });
}

for (const [name, input, call] of cases) {
  test(`parses ${name}`, (t) => {
    const parsed = parseSessionCall(input);
    t.true(parsed.ok, JSON.stringify(parsed));
    if (parsed.ok) t.deepEqual(parsed.call, call);
  });
}

const refused: [string, unknown][] = [
  ['a missing operation with a title and a task (never a create)', { title: 'new thing', task: 'do it' }],
  ['a missing operation with only an id', { sessionID: 'pr-1741' }],
  ['a create that names a session', { operation: 'create', args: { sessionID: 'pr-1741', title: 't', task: 'x' } }],
  ['a send without a task', { operation: 'send', args: { sessionID: 'pr-1741' } }],
  ['a send without an id', { operation: 'send', args: { task: 'x' } }],
  ['an unknown operation', { operation: 'spawn', args: { title: 't', task: 'x' } }],
  ['arguments that are not JSON', '{operation: send'],
  ['an array', [1, 2]],
  ['an empty id', { operation: 'status', args: { sessionID: ' ' } }],
];

for (const [name, input] of refused) {
  test(`refuses ${name} with a typed error`, (t) => {
    const parsed = parseSessionCall(input);
    t.false(parsed.ok);
    if (!parsed.ok) t.is(parsed.code, 'session_call_invalid');
  });
}

const atCap = {
  title: 't'.repeat(MAX_TITLE_CHARS),
  topic: 'p'.repeat(MAX_TOPIC_CHARS),
  agent: 'a'.repeat(MAX_AGENT_CHARS),
  routingDescription: 'd'.repeat(MAX_ROUTING_DESCRIPTION_CHARS),
  routingAliases: Array.from({ length: MAX_ROUTING_ALIASES }, (_, i) => `${i}`.padEnd(MAX_ROUTING_ALIAS_CHARS, 'x')),
};

test('a create with every model-written field at its cap is taken as it is', (t) => {
  const parsed = parseSessionCall(create(atCap));
  t.true(parsed.ok, JSON.stringify(parsed));
  if (parsed.ok) t.like(parsed.call, { operation: 'create', ...atCap });
});

const overCap: [string, Record<string, unknown>, RegExp][] = [
  ['a title', { title: 't'.repeat(MAX_TITLE_CHARS + 1) }, new RegExp(`^title is ${MAX_TITLE_CHARS + 1} bytes[^;]*; the limit is ${MAX_TITLE_CHARS}`)],
  ['a topic', { topic: 'p'.repeat(MAX_TOPIC_CHARS + 1) }, /^topic is \d+ bytes[^;]*; the limit is/],
  ['an agent', { agent: 'a'.repeat(MAX_AGENT_CHARS + 1) }, /^agent is \d+ bytes[^;]*; the limit is/],
  ['a routingDescription', { routingDescription: 'd'.repeat(MAX_ROUTING_DESCRIPTION_CHARS + 1) }, /^routingDescription is \d+ bytes[^;]*; the limit is/],
  [
    'too many routingAliases',
    { routingAliases: Array.from({ length: MAX_ROUTING_ALIASES + 1 }, (_, i) => `a${i}`) },
    /^routingAliases has \d+ aliases; the limit is/,
  ],
  ['a routingAlias', { routingAliases: ['ok', 'x'.repeat(MAX_ROUTING_ALIAS_CHARS + 1)] }, /^routingAliases\[1\] is \d+ bytes[^;]*; the limit is/],
];
for (const [name, extra, why] of overCap) {
  test(`a create with ${name} over its cap is refused invalid_input (nothing cut short, nothing created)`, (t) => {
    const parsed = parseSessionCall(create({ ...atCap, ...extra }));
    t.false(parsed.ok);
    if (parsed.ok) return;
    t.is(parsed.code, 'invalid_input');
    t.regex(parsed.message, why);
    t.regex(parsed.message, /; nothing was created$/);
  });
}

test('property: a create is taken with its fields exactly as written, or refused; never cut short', (t) => {
  const len = (max: number) => fc.integer({ min: 1, max: max + 3 });
  const aliasLengths = fc.array(len(MAX_ROUTING_ALIAS_CHARS), { maxLength: MAX_ROUTING_ALIASES + 2 });
  fc.assert(
    fc.property(len(MAX_TITLE_CHARS), len(MAX_ROUTING_DESCRIPTION_CHARS), aliasLengths, (title, description, aliases) => {
      const args = { title: 'T'.repeat(title), routingDescription: 'D'.repeat(description), routingAliases: aliases.map((n) => 'A'.repeat(n)) };
      const parsed = parseSessionCall(create(args));
      const within =
        title <= MAX_TITLE_CHARS &&
        description <= MAX_ROUTING_DESCRIPTION_CHARS &&
        aliases.length <= MAX_ROUTING_ALIASES &&
        aliases.every((n) => n <= MAX_ROUTING_ALIAS_CHARS);
      if (!parsed.ok) return !within && parsed.code === 'invalid_input';
      return within && JSON.stringify(parsed.call) === JSON.stringify({ ...parsed.call, ...args });
    }),
  );
  t.pass();
});

test('property: nothing parses as a create unless it says operation create and names no session', (t) => {
  const field = fc.constantFrom('sessionID', 'sessionId', 'title', 'task', 'agent', 'topic', 'routingDescription', 'operation');
  const value = fc.oneof(
    { weight: 4, arbitrary: fc.stringMatching(/^[a-z0-9 ]{1,6}$/) },
    { weight: 2, arbitrary: fc.constantFrom('create', 'CREATE', ' send ', 'list', 'status') },
    { weight: 1, arbitrary: fc.oneof(fc.string(), fc.integer(), fc.constant(null)) },
  );
  const obj = fc.dictionary(field, value, { maxKeys: 6 });
  fc.assert(
    fc.property(obj, fc.option(obj, { nil: undefined }), (top, args) => {
      const input: Record<string, unknown> = args === undefined ? top : { ...top, args };
      const parsed = parseSessionCall(input);
      if (!parsed.ok || parsed.call.operation !== 'create') return true;
      const said = typeof top.operation === 'string' && top.operation.trim().toLowerCase() === 'create';
      const named = [top, args ?? {}].some((o) => o.sessionID !== undefined || o.sessionId !== undefined);
      return said && !named;
    }),
    { numRuns: 2000 },
  );
  t.pass();
});

test('the orchestrator is offered exactly its three tools, with object schemas', (t) => {
  t.deepEqual(
    ORCHESTRATOR_TOOLS.map((d) => d.name),
    ['session', 'list_orchestrator_agents', 'update_orchestrator_agent_description'],
  );
  for (const d of ORCHESTRATOR_TOOLS) t.is(d.parameters.type, 'object');
});

test('property: a dispatch request id is stable, distinct per call, and within the request-id limit', (t) => {
  fc.assert(
    fc.property(
      fc.uuid(),
      fc.integer({ min: 1, max: 999 }),
      fc.string({ minLength: 1, maxLength: 500 }),
      fc.string({ minLength: 1, maxLength: 500 }),
      (turnId, step, a, b) => {
        const wf = `orchestrator/${'o'.repeat(64)}`;
        const idA = dispatchRequestId(wf, { turnId, step, callId: a });
        return (
          idA === dispatchRequestId(wf, { turnId, step, callId: a }) &&
          idA.length <= 200 &&
          (a === b || idA !== dispatchRequestId(wf, { turnId, step, callId: b }) || (a.length > 64 && b.length > 64))
        );
      },
    ),
  );
  t.not(dispatchRequestId('o', { turnId: 't', step: 1, callId: 'x'.repeat(100) }), dispatchRequestId('o', { turnId: 't', step: 1, callId: 'x'.repeat(101) }));
});

test('an orchestrator start is checked like a session create: id, repo, host, models, limits', (t) => {
  const good = { orchestratorId: 'fleet-1', repo: '/srv/repo', host: 'h1' };
  t.is(startOrchestratorProblem(good), undefined);
  t.is(startOrchestratorProblem({ ...good, childModel: { provider: 'scripted', scenario: '/s.json' }, limits: { turnsPerRun: 5 } }), undefined);
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ ...good, orchestratorId: '../x' }, /orchestrator id/],
    [{ ...good, repo: 'relative/path' }, /repo must be an absolute path/],
    [{ ...good, host: 'no spaces' }, /host must be/],
    [{ ...good, childModel: { provider: 'gpt' } }, /childModel must be/],
    [{ ...good, limits: { turnsPerRun: 0 } }, /turnsPerRun/],
    [{ ...good, limits: { sparkle: 1 } }, /unknown limit sparkle/],
    [{ ...good, title: '  ' }, /title/],
  ];
  for (const [input, why] of bad) {
    const problem = startOrchestratorProblem(input);
    t.is(problem?.code, 'invalid_input', JSON.stringify(input));
    t.regex(problem?.message ?? '', why);
  }
});

test('a create accepted before the caps still yields its task when read again without them (a dispatch retried across a deploy)', (t) => {
  const args = JSON.stringify({ operation: 'create', args: { title: 'x'.repeat(500), task: 'do it' } });
  t.false(parseSessionCall(args).ok);
  const read = parseSessionCall(args, { caps: false });
  t.true(read.ok && 'task' in read.call && read.call.task === 'do it');
});

test('caps count UTF-8 bytes: a title of 3-byte characters is refused at a third of the ASCII length', (t) => {
  const title = (n: number) => JSON.stringify({ operation: 'create', args: { title: '€'.repeat(n), task: 'do it' } });
  t.true(parseSessionCall(title(Math.floor(MAX_TITLE_CHARS / 3))).ok);
  const over = parseSessionCall(title(Math.floor(MAX_TITLE_CHARS / 3) + 1));
  t.false(over.ok);
  t.is(!over.ok && over.code, 'invalid_input');
});
