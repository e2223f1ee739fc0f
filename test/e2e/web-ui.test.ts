/**
 * What an operator sees in the Temporal Web UI, for a session, an orchestrator and a team run: driven through the
 * dev server's own Web UI with headless Chromium (playwright-core; Debian's `chromium`, or ORCHARD_CHROMIUM), asserting
 * on the text the pages show, with screenshots kept under .orchard/artifacts/web-ui/. The first test reads the same
 * facts through Temporal's API (static summary and details, Current Details, activity summaries, heartbeat details,
 * handler descriptions), so they are checked where Chromium is missing too.
 *
 * The run's own dev server is headless: this file boots one with its Web UI on a free port, in memory.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import MarkdownIt from 'markdown-it';
import { chromium, type Browser, type Page } from 'playwright-core';
import { orchestratorWorkflowId, sessionWorkflowId, teamWorkflowId } from '../../contract/messages';
import { loadDevConfig, startDevServer, type DevServer } from '../../worker/dev-server';
import { makeRepo, uniqueId, writeScenario } from '../helpers/orchard';
import { startScriptedTeam, type Call, type TeamHarness } from '../helpers/team';
import { waitFor } from '../helpers/wait';

const projectRoot = resolve(__dirname, '..', '..');
const ROUTE_FIRST = join(projectRoot, 'scenarios', 'route-first.json');
const ARTIFACTS = join(projectRoot, '.orchard', 'artifacts', 'web-ui');
const CHROMIUM = process.env.ORCHARD_CHROMIUM ?? '/usr/bin/chromium';
const chromiumMissing = existsSync(CHROMIUM)
  ? undefined
  : `there is no Chromium at ${CHROMIUM}: install Debian's chromium (apt-get install chromium; .ci/run does where apt can) or set ORCHARD_CHROMIUM`;
if (chromiumMissing) console.warn(`web-ui.test.ts: the browser test is skipped: ${chromiumMissing}`);

const md = new MarkdownIt({ html: true });
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
/** A hostile title: HTML-like, a column bar, a code fence. */
const TITLE = 'fix <id> | the `login` <b>page</b> & a_b *c* [x](y) &amp;';

interface World {
  server: DevServer;
  h: TeamHarness;
  sessionId: string;
  /** A session whose bash command is still running (its activity pending, heartbeating its output). */
  busyId: string;
  marker: string;
  orchestratorId: string;
  childId: string;
}
let world: World | undefined;
const teardowns: (() => unknown)[] = [];

test.before(async () => {
  const log = (line: string) => console.log(`web-ui: ${line}`);
  const server = await startDevServer(loadDevConfig(projectRoot, { port: 0, ui: true, uiPort: 0, dbFile: null }), log);
  teardowns.push(() => server.stop());
  // The team harness wants a test's teardown: the hook's list stands in for it.
  const scope = { teardown: (fn: () => unknown) => teardowns.push(fn), log } as unknown as ExecutionContext;
  const h = await startScriptedTeam(scope, {
    members: ['implementer'],
    plan: [create('a', 'implementer'), ['plan_approve', {}]],
    temporalAddress: server.address,
  });
  const { client } = h.orchard;
  await h.until('task a completed', (v) => v.executions.some((e) => e.taskId === 'a' && e.state === 'completed'));
  await h.script([['org_run_complete', { summary: 'all done' }]]);
  await h.until('delivered', (v) => v.status === 'delivered');

  const sessionId = uniqueId('ui-session');
  const done = writeScenario({
    name: 'ui-session',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'git status --short | head -5' } }] }, { content: 'looked' }] }],
  });
  await client.createSession({ sessionId, title: TITLE, repo: makeRepo(), model: { provider: 'scripted', scenario: done }, task: 'look around' });
  await client.waitUntilSettled(sessionId, { afterTurn: 1 });

  const marker = `progress-${uniqueId('m')}`;
  const busyId = uniqueId('ui-busy');
  const busy = writeScenario({
    name: 'ui-busy',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: `echo ${marker}; sleep 300` } }] }, { content: 'never' }] }],
  });
  await client.createSession({ sessionId: busyId, title: 'busy', repo: makeRepo(), model: { provider: 'scripted', scenario: busy }, task: 'wait' });
  teardowns.push(() => client.cancel(busyId, 'the Web UI test is over').catch(() => undefined));

  const orchestratorId = uniqueId('ui-orch');
  await client.startOrchestrator({ orchestratorId, repo: makeRepo(), title: 'web <ui> fleet', model: { provider: 'scripted', scenario: ROUTE_FIRST } });
  const { messageId } = await client.message(orchestratorId, { text: 'The login page test is flaky on CI: find out why it fails intermittently.' });
  const { status } = await client.waitForMessageTurn(orchestratorId, messageId);
  const childId = status.children[0]?.childId;
  if (!childId) throw new Error(`the orchestrator created no child: ${JSON.stringify(status)}`);
  world = { server, h, sessionId, busyId, marker, orchestratorId, childId };
});

test.after.always(async () => {
  for (const fn of teardowns.reverse()) await fn();
});

const the = () => {
  if (!world) throw new Error('the before hook did not finish');
  return world;
};
const handle = (workflowId: string) => the().h.orchard.temporal.workflow.getHandle(workflowId);
/** Markdown as a reader sees it: the text of each block, one line each (raw HTML would show as itself, tags included). */
const shown = (markdown: string | undefined): string =>
  md
    .parse(markdown ?? '', {})
    .filter((tk) => tk.type === 'inline')
    .map((tk) => (tk.children ?? []).map((c) => (c.type.startsWith('html') ? `[html ${c.content}]` : c.content)).join(''))
    .join('\n');
const decode = (payload: Payload | null | undefined): unknown => (payload ? defaultPayloadConverter.fromPayload(payload) : undefined);

interface Metadata {
  definition: { type: string; queryDefinitions?: Handler[]; signalDefinitions?: Handler[]; updateDefinitions?: Handler[] };
  currentDetails?: string;
}
interface Handler {
  name: string;
  description?: string;
}
const metadataOf = (workflowId: string) => handle(workflowId).query<Metadata>('__temporal_workflow_metadata');

/** The activity summaries a workflow's history carries, by activity type. */
async function activitySummaries(workflowId: string): Promise<[string, string][]> {
  const { events } = await handle(workflowId).fetchHistory();
  return (events ?? []).flatMap((e) => {
    const scheduled = e.activityTaskScheduledEventAttributes;
    return scheduled ? [[scheduled.activityType?.name ?? '', String(decode(e.userMetadata?.summary) ?? '')] as [string, string]] : [];
  });
}

/** The heartbeat details of a workflow's pending executeTool, once they carry `text`. */
async function pendingToolDetails(workflowId: string, text: string): Promise<Record<string, string>> {
  return waitFor(
    async () => {
      const { raw } = await handle(workflowId).describe();
      const pending = (raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'executeTool');
      const details = decode(pending?.heartbeatDetails?.payloads?.[0]) as Record<string, string> | undefined;
      return details?.outputTail?.includes(text) ? details : undefined;
    },
    60_000,
    `heartbeat details with ${text}`,
  );
}

test.serial('Temporal carries what the Web UI shows: summaries, details as Markdown, heartbeat output, described handlers', async (t) => {
  const w = the();
  const sessionWf = sessionWorkflowId(w.sessionId);

  // Static summary and details, as the client started each kind.
  // The Web UI renders them as Markdown, so they are read here as it shows them.
  const session = await handle(sessionWf).describe();
  t.is(shown(await session.staticSummary()), `session ${w.sessionId}: ${TITLE}`);
  t.is(shown(await session.staticDetails()).split('\n')[0], `session ${TITLE} · agent coder`);
  const orchestrator = await handle(orchestratorWorkflowId(w.orchestratorId)).describe();
  t.is(shown(await orchestrator.staticSummary()), `orchestrator ${w.orchestratorId}: web <ui> fleet`);
  t.regex(shown(await orchestrator.staticDetails()), /^orchestrator web <ui> fleet\nrepo \/\S+ on host host-/);
  const team = await handle(teamWorkflowId(w.h.teamId)).describe();
  t.regex(shown(await team.staticSummary()), new RegExp(`^team ${w.h.teamId}: script s1 `));
  t.regex(shown(await team.staticDetails()), /members: implementer \(Implementer\)/);

  // Activity summaries name the model call's turn and the tool call's command.
  const summaries = await activitySummaries(sessionWf);
  t.deepEqual(
    summaries.filter(([type]) => type === 'modelStep' || type === 'executeTool'),
    [
      ['modelStep', 'model call (turn 1, step 1)'],
      ['executeTool', 'bash: git status --short | head -5'],
      ['modelStep', 'model call (turn 1, step 2)'],
    ],
  );
  t.true(
    (await activitySummaries(teamWorkflowId(w.h.teamId))).some(([type, s]) => type === 'coordinatorTool' && s === 'Coordinator org_run_complete: all done'),
  );

  // A running command's heartbeat details: the tool, its command and its latest output, small.
  const details = await pendingToolDetails(sessionWorkflowId(w.busyId), w.marker);
  t.like(details, { tool: 'bash', command: `echo ${w.marker}; sleep 300` });
  t.true(JSON.stringify(details).length < 4096);

  // Current Details: Markdown with the roster and the board as tables; no raw HTML from the hostile title.
  const tablesOf = (markdown: string) => md.parse(markdown, {}).filter((tk) => tk.type === 'table_open').length;
  const sessionMeta = await metadataOf(sessionWf);
  t.false(md.parse(sessionMeta.currentDetails ?? '', {}).some((tk) => tk.type.startsWith('html')));
  const orchestratorMeta = await metadataOf(orchestratorWorkflowId(w.orchestratorId));
  t.is(tablesOf(orchestratorMeta.currentDetails ?? ''), 1);
  t.regex(orchestratorMeta.currentDetails ?? '', new RegExp(`\\| \`${w.childId}\` \\| Login page flaky test \\|`));
  const teamMeta = await metadataOf(teamWorkflowId(w.h.teamId));
  t.is(tablesOf(teamMeta.currentDetails ?? ''), 2, teamMeta.currentDetails);
  t.regex(teamMeta.currentDetails ?? '', new RegExp(`\\*\\*result branch\\*\\* \`orchard/team/${w.h.teamId}/result\``));

  // Every signal, update and query handler of every kind says what it is for.
  for (const meta of [sessionMeta, orchestratorMeta, teamMeta]) {
    const handlers = [
      ...(meta.definition.queryDefinitions ?? []),
      ...(meta.definition.signalDefinitions ?? []),
      ...(meta.definition.updateDefinitions ?? []),
    ].filter((h) => !h.name.startsWith('__'));
    t.true(handlers.length >= 3, meta.definition.type);
    t.deepEqual(
      handlers.filter((h) => !h.description),
      [],
      `${meta.definition.type}: handlers without a description`,
    );
  }
});

/** The workflow's page in the Web UI, once it shows `expected`; a screenshot is kept either way. */
async function visit(t: ExecutionContext, page: Page, name: string, workflowId: string, tab: string, expected: string[]): Promise<string> {
  const w = the();
  const url = `${w.server.webUiUrl}/namespaces/${w.server.namespace}/workflows/${encodeURIComponent(workflowId)}`;
  let text = '';
  try {
    // The UI polls while a workflow runs: the network never idles, so the test waits for the text instead.
    await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 60_000 });
    await page.locator('a, button, [role=tab]', { hasText: tab }).first().click({ timeout: 30_000 });
    await waitFor(
      async () => {
        // Summary, Details and Current Details are rendered in frames of their own.
        const frames = await Promise.all(
          page.frames().map((f) =>
            f
              .locator('body')
              .innerText()
              .catch(() => ''),
          ),
        );
        text = frames.join('\n----\n');
        return expected.every((e) => text.includes(e));
      },
      30_000,
      `the ${name} page showing ${JSON.stringify(expected)}`,
    );
  } finally {
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
    writeFileSync(join(ARTIFACTS, `${name}.txt`), text);
    t.log(`${name}: ${url} → ${join(ARTIFACTS, `${name}.png`)}`);
  }
  return text;
}

(chromiumMissing ? test.serial.skip : test.serial)(
  `headless Chromium shows a session, an orchestrator and a team run legibly in the Web UI${chromiumMissing ? ` (skipped: ${chromiumMissing})` : ''}`,
  async (t) => {
    const w = the();
    const browser: Browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    t.teardown(() => browser.close());
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });

    const session = await visit(t, page, 'session', sessionWorkflowId(w.sessionId), 'User Metadata', [
      `session ${w.sessionId}: ${TITLE}`,
      `session ${TITLE} · agent coder`,
      `branch orchard/${w.sessionId}/work on host`,
      'bash: git status --short | head -5',
    ]);
    t.false(session.includes('\\'), 'an escape shown as a backslash');

    // The running tool call: its summary in the event history, its command and output so far in its heartbeat details.
    await visit(t, page, 'session-running', sessionWorkflowId(w.busyId), 'History', [`executeTool • bash: echo ${w.marker}; sleep 300`]);
    await visit(t, page, 'session-heartbeat', sessionWorkflowId(w.busyId), 'Pending Activities', [
      '"tool": "bash"',
      `"command": "echo ${w.marker}; sleep 300"`,
      `"outputTail": "${w.marker}`,
    ]);

    // A table's rows read as tab-separated cells.
    const orchestrator = await visit(t, page, 'orchestrator', orchestratorWorkflowId(w.orchestratorId), 'User Metadata', [
      `orchestrator ${w.orchestratorId}: web <ui> fleet`,
      'routes to it with session send <id> <task>',
    ]);
    t.regex(
      orchestrator,
      new RegExp(`^child\ttitle\tagent\tstatus\tin roster\tturn ends\n${w.childId}\tLogin page flaky test\tcoder\t(running|idle)\tyes\t`, 'm'),
    );

    const team = await visit(t, page, 'team', teamWorkflowId(w.h.teamId), 'User Metadata', [`orchard/team/${w.h.teamId}/result`, 'delivered']);
    t.regex(team, /^certificate cert-\S+ · generation \d+ · revision \d+ · 1 task\(s\)$/m);
    t.regex(team, /^task\tmember\tsession\tstate\na\timplementer\t\S+\tcompleted$/m);
    t.regex(team, /^member\trole\tsession\nimplementer\tImplementer\t\S+$/m);
  },
);
