import fs from 'node:fs';
import path from 'node:path';
import test from 'ava';
import type { z } from 'zod';
import {
  createRequestProblem,
  createSessionProblem,
  MAX_TASK_CHARS,
  messageProblem,
  sendProblem,
  startOrchestratorProblem,
  startTeamProblem,
  type Problem,
} from '../../contract/messages';
import * as messages from '../../contract/messages';
import { CreateRequest, CreateSessionInput, MessageInput, SendInput, StartOrchestratorInput, StartTeamInput, WORKFLOWS } from '../../contract/schema';
import { REGENERATE, SCHEMA_DIR, renderSchemaFiles } from '../../scripts/schema';

const root = path.resolve(__dirname, '..', '..');

test('docs/schema holds exactly what contract/schema.ts generates', (t) => {
  const dir = path.join(root, SCHEMA_DIR);
  const expected = renderSchemaFiles();
  const present = fs.existsSync(dir) ? fs.readdirSync(dir).filter((name) => name.endsWith('.json')) : [];
  const stale = [
    ...[...expected].filter(([name, content]) => !present.includes(name) || fs.readFileSync(path.join(dir, name), 'utf8') !== content).map(([name]) => name),
    ...present.filter((name) => !expected.has(name)),
  ];
  t.deepEqual(stale, [], `${SCHEMA_DIR}/ is stale (${stale.join(', ')}): run ${REGENERATE}`);
});

test('the generated JSON Schema of every kind has a start input, a result and its handlers', (t) => {
  const catalogue = JSON.parse(renderSchemaFiles().get('messages.json')!);
  t.deepEqual(
    catalogue.workflows.map((w: any) => [w.workflowType, w.messages.map((m: any) => `${m.kind}:${m.name}`)]),
    [
      [
        'childSession',
        ['update:create', 'update:send', 'signal:send', 'update:cancel', 'update:resolveHold', 'update:setBudget', 'query:status', 'query:transcriptRefs'],
      ],
      [
        'orchestratorSession',
        ['update:message', 'signal:message', 'signal:childTurnEnded', 'query:status', 'query:roster', 'query:start', 'update:fundChild', 'update:setBudget'],
      ],
      [
        'teamRun',
        [
          'update:message',
          'signal:message',
          'update:reassignTask',
          'update:cancelTask',
          'update:resolveHandoff',
          'update:pauseTeam',
          'update:resumeTeam',
          'update:archiveTeam',
          'update:verifyTeam',
          'update:mergeTeam',
          'signal:fact',
          'signal:childTurnEnded',
          'signal:executionSettled',
          'query:status',
          'query:start',
          'update:fundChild',
          'update:setBudget',
        ],
      ],
      ['teamTaskExecution', ['signal:turnEnded', 'query:execution']],
    ],
  );
  // Every reference resolves to a definition in the document it names.
  for (const w of catalogue.workflows) {
    const doc = JSON.parse(renderSchemaFiles().get(w.schema)!);
    const refs = [w.input, w.result, ...w.messages.flatMap((m: any) => [m.input, m.result])].filter(Boolean);
    for (const ref of refs) t.truthy(doc.$defs[ref.split('#/$defs/')[1]], ref);
    const inner = JSON.stringify(doc).match(/"\$ref":"#\/\$defs\/[^"]+"/g) ?? [];
    for (const r of inner) t.truthy(doc.$defs[r.slice('"$ref":"#/$defs/'.length, -1)], `${w.schema}: ${r}`);
  }
});

test('every signal, update and query contract/messages.ts defines has its schemas in the catalogue', (t) => {
  const defined = Object.entries(messages).filter(
    ([, value]) => typeof value === 'object' && value !== null && ['signal', 'update', 'query'].includes((value as { type?: string }).type ?? ''),
  );
  t.true(defined.length >= 20);
  const catalogued = new Set(WORKFLOWS.flatMap((w) => w.messages.map((m) => m.definition)));
  t.deepEqual(
    defined.filter(([, definition]) => !catalogued.has(definition as never)).map(([name]) => name),
    [],
    'add each to WORKFLOWS in contract/schema.ts',
  );
});

/**
 * The workflows' validators are the `xxxProblem` functions (zod stays out of the workflow bundle); the schemas say
 * the same in JSON Schema. Where a rule cannot be said in JSON Schema (a task of blanks, "..", the SLO after the
 * timeout, a Member's session id), the schema is looser, never stricter: whatever a validator accepts, its schema
 * accepts too.
 */
const agreement: { name: string; schema: z.ZodType; problem: (input: unknown) => Problem | undefined; cases: [unknown, 'both' | 'validator-only'][] }[] = [];
const ok = (input: unknown): [unknown, 'both'] => [input, 'both'];
const bad = (input: unknown, only: 'both' | 'validator-only' = 'both'): [unknown, 'both' | 'validator-only'] => [input, only];
const place = { repo: '/srv/repo', host: 'host-1' };
const big = 'x'.repeat(MAX_TASK_CHARS + 1);

agreement.push(
  {
    name: 'send',
    schema: SendInput,
    problem: sendProblem,
    cases: [
      ok({ task: 'fix it' }),
      ok({ task: 'fix it', requestId: 'r1', from: 'svc' }),
      bad({}),
      bad({ task: '' }),
      bad({ task: '   ' }, 'validator-only'),
      bad({ task: big }),
      bad({ task: 'x', requestId: '' }),
      bad({ task: 'x', requestId: 'r'.repeat(201) }),
      bad({ task: 'x', from: 3 }),
      bad('fix it'),
    ],
  },
  {
    name: 'create',
    schema: CreateRequest,
    problem: createRequestProblem,
    cases: [ok({ requestId: 'r1' }), ok({ requestId: 'r1', task: 'go' }), bad({ task: 'go' }), bad({ requestId: 'r1', task: '' })],
  },
  {
    name: 'message',
    schema: MessageInput,
    problem: messageProblem,
    cases: [ok({ text: 'hello' }), ok({ text: 'hello', requestId: 'm1' }), bad({ text: '' }), bad({ text: big }), bad({ requestId: 'm1' })],
  },
  {
    name: 'create session',
    schema: CreateSessionInput,
    problem: createSessionProblem,
    cases: [
      ok({ sessionId: 's1', title: 'T', ...place }),
      ok({ sessionId: 's1', title: 'T', ...place, model: { provider: 'scripted', scenario: '/s.json' }, limits: { maxStepsPerTurn: 3 }, task: 'go' }),
      ok({ sessionId: 'team1__planner', title: 'T', ...place, team: { teamId: 'team1', memberId: 'planner' } }),
      bad({ sessionId: '-s', title: 'T', ...place }),
      bad({ sessionId: 's..1', title: 'T', ...place }, 'validator-only'),
      bad({ sessionId: 's1', title: '', ...place }),
      bad({ sessionId: 's1', title: 'T', ...place, repo: 'relative/path' }),
      bad({ sessionId: 's1', title: 'T', ...place, host: 'no spaces' }),
      bad({ sessionId: 's1', title: 'T', ...place, model: { provider: 'scripted' } }),
      bad({ sessionId: 's1', title: 'T', ...place, limits: { maxStepsPerTurn: 0 } }),
      bad({ sessionId: 's1', title: 'T', ...place, limits: { contextChars: 100 } }),
      bad({ sessionId: 's1', title: 'T', ...place, limits: { nope: 1 } }),
    ],
  },
  {
    name: 'start orchestrator',
    schema: StartOrchestratorInput,
    problem: startOrchestratorProblem,
    cases: [
      ok({ orchestratorId: 'o1', ...place }),
      ok({ orchestratorId: 'o1', ...place, title: 'Fleet', childModel: { provider: 'default' } }),
      bad({ orchestratorId: 'o/1', ...place }),
      bad({ orchestratorId: 'o1', ...place, title: '' }),
      bad({ orchestratorId: 'o1', ...place, model: { provider: 'other' } }),
    ],
  },
  {
    name: 'start team',
    schema: StartTeamInput,
    problem: startTeamProblem,
    cases: [
      ok({ teamId: 't1', goal: 'ship', ...place }),
      ok({ teamId: 't1', goal: 'ship', ...place, members: [{ memberId: 'planner', role: 'Planner' }], handoff: { sloMs: 100, timeoutMs: 200 } }),
      bad({ teamId: 't1', goal: '', ...place }),
      bad({ teamId: 't1', goal: 'ship', ...place, members: [] }),
      bad({ teamId: 't1', goal: 'ship', ...place, members: [{ memberId: 'Planner', role: 'P' }] }),
      bad({ teamId: 't1', goal: 'ship', ...place, handoff: { sloMs: 0 } }),
      bad({ teamId: 't1', goal: 'ship', ...place, handoff: { slo: 1 } }),
      bad({ teamId: 't1', goal: 'ship', ...place, handoff: { sloMs: 300, timeoutMs: 200 } }, 'validator-only'),
      bad({ teamId: 't__1', goal: 'ship', ...place }, 'validator-only'),
    ],
  },
);

for (const { name, schema, problem, cases } of agreement) {
  test(`the ${name} schema accepts what its validator accepts and refuses what it refuses`, (t) => {
    for (const [input, which] of cases) {
      const validator = problem(input) === undefined;
      const parsed = schema.safeParse(input).success;
      const what = JSON.stringify(input).slice(0, 120);
      if (validator) t.true(parsed, `the validator accepts ${what}; the schema must too`);
      else if (which === 'both') t.false(parsed, `the validator refuses ${what}; so must the schema`);
      else t.true(parsed, `${what}: a rule JSON Schema cannot state (if the schema now refuses it, mark the case 'both')`);
    }
  });
}
