import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { readBoard } from '../../activities/store/team';
import { orchestratorWorkflowId, teamWorkflowId } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { calls, final, fleetModel, lastUserText, session, startFleet } from '../helpers/fleet-model';
import { completion, stubModel } from '../helpers/model-stub';
import { keepHistory, makeRepo, startOrchard, testStackEnv, uniqueId, writeScenario } from '../helpers/orchard';
import { stamps, twoMemberTeam, untilTeam, writerLog, writerTeamModel } from '../helpers/team';
import { sharedToxiproxy } from '../helpers/toxiproxy';
import { waitFor } from '../helpers/wait';

/**
 * PostgreSQL goes away for a while (ORCHARD_TEST_PG_CUT_MS, 30 s by default) under running workflows: the workers
 * reach it through Toxiproxy, which drops every connection and refuses new ones until it is restored. Nothing may
 * fail: every workflow still runs afterwards, every accepted message is answered exactly once, no tool call runs
 * twice. The test itself reads the database directly.
 */
const CUT_MS = Number(process.env.ORCHARD_TEST_PG_CUT_MS ?? 30_000);
const embedded = testStackEnv().embedded;
const toxiproxy = sharedToxiproxy(test);
const faultTest = embedded ? test.skip : test;
if (embedded) console.warn('postgres-outage: skipped on embedded PGlite (one shared backend session); CI runs it against PostgreSQL');

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Echoes the user's words: one model call per message, no tools. */
const echo = fleetModel((ctx) => final(`answered: ${ctx.text}`));

faultTest('an outage while messages arrive (update, signal, a retried update) fails nothing; each message is answered once', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const fleet = await startFleet(t, echo, { databaseUrl: pg.url });
  const { orchard, id } = fleet;
  const handle = orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id));
  const warm = await fleet.say('before the outage');

  await pg.cut();
  const cutAt = Date.now();
  const update = orchard.client.message(id, { text: 'sent during the outage', requestId: 'during-1' });
  await handle.signal('message', { text: 'signalled during the outage', requestId: 'during-2' });
  // The client's response was lost: it asks again with the same request id while the first is still being stored.
  await sleep(1_000);
  const retry = orchard.client.message(id, { text: 'sent during the outage', requestId: 'during-1' });
  // Queries answer from workflow state while the store is away.
  t.is((await orchard.client.orchestratorStatus(id)).orchestratorId, id);
  await sleep(Math.max(0, CUT_MS - (Date.now() - cutAt)));
  t.is((await handle.describe()).status.name, 'RUNNING', 'the orchestrator ran through the outage');
  await pg.restore();

  const [first, again] = await Promise.all([update, retry]);
  t.is(again.messageId, first.messageId, 'the retry is answered with the first message id');
  t.deepEqual([first.duplicate, again.duplicate], [false, true]);
  const view = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.turnsCompleted >= 3 && v.status === 'idle' ? v : undefined;
    },
    120_000,
    'both outage messages answered',
  );
  t.is((await handle.describe()).status.name, 'RUNNING');
  // Three messages, three turns: each answered exactly once, none lost, none doubled, no signal refused.
  t.is(warm.messageId, 'm1');
  t.true(['m2', 'm3'].includes(first.messageId), first.messageId);
  t.deepEqual(view.turns.map((turn) => turn.taskId).sort(), ['m1', 'm2', 'm3']);
  t.is(view.refusedSignals, undefined);
  const answers = fleet.orchestratorRequests().map((b) => String(b.messages.at(-1).content));
  t.is(answers.filter((text) => text === 'sent during the outage').length, 1);
  t.is(answers.filter((text) => text === 'signalled during the outage').length, 1);
  // The retry stored nothing of its own.
  const rows = await orchard.pool.query(`SELECT task_id FROM session_tasks WHERE session_id = $1 ORDER BY task_id`, [id]);
  t.deepEqual(
    rows.rows.map((r) => r.task_id),
    ['m1', 'm2', 'm3'],
  );
  await fleet.keepHistory('orchestrator-messages-during-outage');
});

faultTest('an outage while a command runs: the turn finishes after it and the command ran once', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const orchard = await startOrchard(t, { databaseUrl: pg.url });
  const sessionId = uniqueId('outage');
  const scenario = writeScenario({
    name: 'outage',
    turns: [
      {
        steps: [
          { tool_calls: [{ name: 'bash', arguments: { command: 'echo ran >> runs.log; sleep 2; echo done >> runs.log' } }] },
          { tool_calls: [{ name: 'bash', arguments: { command: 'echo second >> runs.log' } }] },
          { content: 'finished after the outage' },
        ],
      },
    ],
  });
  await orchard.client.createSession({ sessionId, title: 'outage', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'run it' });
  const worktree = await waitFor(async () => (await orchard.client.status(sessionId)).worktree, 60_000, 'the worktree');
  const runsLog = join(worktree, 'runs.log');
  await waitFor(() => existsSync(runsLog) || undefined, 60_000, 'the command started');

  // The command's result (and the next call's claim) must wait for the store.
  await pg.cutFor(CUT_MS);
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1, timeoutMs: 120_000 });
  t.is(view.status, 'idle');
  t.is(view.lastTurn?.outcome, 'finished', JSON.stringify(view.lastTurn));
  t.is(view.lastTurn?.finalExcerpt, 'finished after the outage');
  t.deepEqual(readFileSync(runsLog, 'utf8').trim().split('\n'), ['ran', 'done', 'second'], 'each command ran exactly once');
});

const startTeamThrough = (t: import('ava').ExecutionContext, databaseUrl: string) => twoMemberTeam(t, { databaseUrl });

faultTest('a team started during an outage opens after it and answers its goal once', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const { orchard, teamId, start } = await startTeamThrough(t, pg.url);
  await pg.cut();
  await start();
  await sleep(CUT_MS);
  const handle = orchard.temporal.workflow.getHandle(teamWorkflowId(teamId));
  t.is((await handle.describe()).status.name, 'RUNNING', 'the team ran through the outage');
  await pg.restore();
  const view = await untilTeam(orchard, teamId, 'the goal answered', (v) => v.turns.length >= 1 && v.executions.length >= 1, 120_000);
  t.is((await handle.describe()).status.name, 'RUNNING');
  t.is(view.turns[0].outcome, 'finished');
  // The goal was stored once and opened exactly one Coordinator turn.
  const goals = await orchard.pool.query(`SELECT task_id FROM session_tasks WHERE session_id = $1 AND task LIKE 'Build%'`, [teamId]);
  t.is(goals.rowCount, 1);
});

faultTest('an outage between fence and release: the team keeps answering, the receipt settles, the writers never overlap', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const { orchard, teamId, start } = await startTeamThrough(t, pg.url);
  await start();
  const oldLog = await writerLog(orchard, teamId);

  const request = { taskId: 'implement', newOwner: 'reviewer', reason: 'move it', requestId: 'reassign-1' };
  const receipt = await orchard.client.reassignTask(teamId, request);
  await pg.cut();
  const cutAt = Date.now();
  // A lost response: the same request again is answered with the same receipt, not refused (the task is no longer running).
  t.like(await orchard.client.reassignTask(teamId, request), { receiptId: receipt.receiptId, newTaskId: receipt.newTaskId });
  // Queries answer from workflow state while the store is away; the workflow keeps running.
  t.is((await orchard.client.teamStatus(teamId)).receipts[0].receiptId, receipt.receiptId);
  await sleep(Math.max(0, CUT_MS - (Date.now() - cutAt)));
  const handle = orchard.temporal.workflow.getHandle(teamWorkflowId(teamId));
  t.is((await handle.describe()).status.name, 'RUNNING');
  await pg.restore();

  // The receipt leaves requested/yielding: released, or settled for a user (timeout/unknown) — never stuck.
  const settled = await untilTeam(orchard, teamId, 'the receipt settled', (v) => !['requested', 'yielding'].includes(v.receipts[0]?.state), 120_000);
  t.is(settled.receipts.length, 1, 'one receipt for the request and its retry');
  if (settled.receipts[0].state !== 'released') {
    // The old runtime stopped after the outage: the user's release, with its proof, goes through.
    let refused = '';
    await waitFor(
      () =>
        orchard.client.resolveHandoff(teamId, { receiptId: receipt.receiptId, action: 'release', reason: 'after the outage' }).then(
          () => true,
          (err: Error) => void (refused = err.message),
        ),
      60_000,
      'the release accepted',
    ).catch((err: Error) => {
      throw new Error(`${err.message}; receipt ${JSON.stringify(settled.receipts[0])}; last refusal: ${refused}`);
    });
  }
  const done = await untilTeam(
    orchard,
    teamId,
    'the replacement completed',
    (v) => v.executions.some((e) => e.taskId === receipt.newTaskId && e.state === 'completed'),
    150_000,
  );
  t.is(done.receipts[0].state, 'released');
  t.is((await handle.describe()).status.name, 'RUNNING');
  const newSession = await orchard.client.status(memberSessionId(teamId, 'reviewer'));
  const oldStamps = stamps(oldLog);
  const newStamps = stamps(join(newSession.worktree!, 'new.log'));
  t.true(newStamps[0] > oldStamps[oldStamps.length - 1], 'the replacement wrote only after the old writer stopped');
  await keepHistory(orchard, teamWorkflowId(teamId), 'team-handoff-during-outage');
});

faultTest(
  'a pause asked for during an outage holds after it: one fence, its receipt released, the writer stopped; resume runs the task again; an archive ends the run cancelled',
  async (t) => {
    t.timeout(CUT_MS + 240_000);
    const began = Date.now();
    const step = (what: string) => t.log(`${((Date.now() - began) / 1000).toFixed(1)} s: ${what}`);
    const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
    // The writer must outlast the cut (400 lines, 20 s, would end during a 30 s one and leave nothing to pause).
    const longWriter = (body: any) => JSON.parse(JSON.stringify(writerTeamModel(body)).replace('seq 1 400', 'seq 1 8000'));
    const { orchard, teamId, start } = await twoMemberTeam(t, { databaseUrl: pg.url, model: longWriter });
    await start();
    const oldLog = await writerLog(orchard, teamId);
    step('writing; the store goes away');
    await pg.cut();
    const cutAt = Date.now();
    // The user's pause, and its retry after a lost response, both while the store is away: answered once it is back.
    const request = { reason: 'hold on', requestId: 'pause-1' };
    const paused = orchard.client.teamLifecycle(teamId, 'pause', request);
    const retried = orchard.client.teamLifecycle(teamId, 'pause', request);
    await sleep(Math.max(0, CUT_MS - (Date.now() - cutAt)));
    const handle = orchard.temporal.workflow.getHandle(teamWorkflowId(teamId));
    t.is((await handle.describe()).status.name, 'RUNNING', 'the team ran through the outage');
    await pg.restore();
    step('the store is back');
    const [first, second] = await Promise.all([paused, retried]);
    step('the pause answered');
    t.is(first.state, 'paused');
    t.deepEqual(
      second.receipts.map((r) => r.receiptId),
      first.receipts.map((r) => r.receiptId),
    );
    // The receipt leaves requested/yielding: released, or settled for a user (the outage may outlast the handoff
    // timeout: retries back off) — never stuck; then the user's release, with its proof, goes through.
    const decided = await untilTeam(
      orchard,
      teamId,
      'the pause receipt settled',
      (v) => v.receipts.length > 0 && !['requested', 'yielding'].includes(v.receipts[0].state),
      120_000,
    );
    if (decided.receipts[0].state !== 'released') {
      step(`the pause receipt is ${decided.receipts[0].state}: the user releases it`);
      await waitFor(
        () =>
          orchard.client.resolveHandoff(teamId, { receiptId: decided.receipts[0].receiptId, action: 'release', reason: 'after the outage' }).then(
            () => true,
            () => undefined,
          ),
        60_000,
        'the release accepted',
      );
    }
    const settled = await untilTeam(
      orchard,
      teamId,
      'the pause receipt released',
      (v) => v.receipts.length > 0 && v.receipts.every((r) => r.state === 'released'),
      120_000,
    );
    t.deepEqual(
      settled.receipts.map((r) => [r.kind, r.oldTaskId]),
      [['pause', 'implement']],
    );
    t.is(settled.status, 'paused');
    const lines = stamps(oldLog).length;
    await sleep(1_000);
    t.is(stamps(oldLog).length, lines, 'the paused writer has stopped');

    step('paused, receipt released');
    await orchard.client.teamLifecycle(teamId, 'resume', { reason: 'go on', requestId: 'resume-1' });
    await untilTeam(
      orchard,
      teamId,
      'the task running again',
      (v) => v.executions.filter((e) => e.taskId === 'implement' && e.state === 'running').length === 1,
      120_000,
    );
    step('running again; archive');
    const archived = await orchard.client.teamLifecycle(teamId, 'archive', { reason: 'abandon', requestId: 'archive-1' });
    step('archived');
    t.is(archived.state, 'archived');
    // Running again, it was fenced and stopped (a receipt of kind archive); had it not started yet, it was cancelled.
    t.true(
      archived.receipts.some((r) => r.kind === 'archive' && r.oldTaskId === 'implement') || (archived.cancelledTasks ?? []).includes('implement'),
      JSON.stringify(archived),
    );
    const final = (await handle.result()) as import('../../contract/messages').TeamStatusView;
    t.is(final.outcome, 'cancelled');
    t.true(
      final.receipts.every((r) => r.state === 'released'),
      JSON.stringify(final.receipts),
    );
    t.is((await readBoard(orchard.pool, teamId)).tasks.find((x) => x.taskId === 'implement')?.status, 'cancelled');
  },
);

/**
 * Cuts the store once `sessionId`'s model step that called `tool` is recorded: the activities that act on that call
 * (reading it, dispatching, certifying) then meet the outage.
 */
async function cutAfterCall(pool: import('pg').Pool, pg: { cutFor(ms: number): Promise<void> }, sessionId: string, tool: string): Promise<void> {
  await waitFor(
    async () => {
      const { rows } = await pool.query(`SELECT 1 FROM transcript_entries WHERE session_id = $1 AND role = 'assistant' AND tool_calls::text LIKE $2 LIMIT 1`, [
        sessionId,
        `%"${tool}"%`,
      ]);
      return rows.length > 0 || undefined;
    },
    150_000,
    `${sessionId} called ${tool}`,
  );
  await pg.cutFor(CUT_MS);
}

faultTest('an outage while the orchestrator creates a child: one child, its task answered once, nothing failed', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const model = fleetModel(
    (ctx) => {
      if (ctx.results.length > 0) return final('done');
      if (ctx.text.startsWith('create')) return calls(session('create', { title: 'worker', task: 'work on it', topic: 'worker' }));
      return final('noted');
    },
    (body) => completion({ content: `child finished: ${lastUserText(body)}` }),
  );
  const fleet = await startFleet(t, model, { databaseUrl: pg.url });
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'create a worker' });
  // The dispatch (reading the call, the child's create and the store write of its task) meets the outage.
  await cutAfterCall(orchard.pool, pg, id, 'session');
  const view = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children.length === 1 && v.children[0].turnEnds >= 1 && v.status === 'idle' && v.turnsCompleted >= 2 ? v : undefined;
    },
    150_000,
    'the child created, its turn ended and reported',
  );
  t.is((await orchard.temporal.workflow.getHandle(orchestratorWorkflowId(id)).describe()).status.name, 'RUNNING');
  t.is(view.deliveries.length, 1, 'one dispatch');
  t.false(
    fleet.toolResults().some((r) => r.startsWith('error')),
    'the model was told of no failure',
  );
  const childId = view.children[0].childId;
  const tasks = await orchard.pool.query(`SELECT task_id, state FROM session_tasks WHERE session_id = $1`, [childId]);
  t.deepEqual(
    tasks.rows.map((r) => r.state),
    ['done'],
    'the child got its task once and finished it',
  );
});

faultTest('an outage as the Coordinator requests completion: one certificate, delivered, nothing failed', async (t) => {
  const pg = await toxiproxy().proxyDatabase(testStackEnv().databaseUrl);
  const stepOf = (body: any) => {
    const messages: any[] = body.messages;
    return messages.slice(messages.map((m) => m.role).lastIndexOf('user') + 1).filter((m) => m.role === 'tool').length;
  };
  const stub = await stubModel(t, (body) => {
    const step = stepOf(body);
    if (!(body.tools ?? []).some((tool: any) => tool.function.name === 'task_list')) {
      if (step === 0) return calls(['bash', { command: 'echo work > work.txt && git add work.txt && git commit -qm work' }]);
      return completion({ content: 'committed work.txt' });
    }
    const text = lastUserText(body);
    if (step > 0) return final('Done.');
    if (text.startsWith('Build')) {
      return calls(['task_create', { taskId: 'work', title: 'work', description: 'Commit work.txt.', owner: 'implementer' }], ['plan_approve', {}]);
    }
    if (text.includes('completion_candidate.state is ready')) return calls(['org_run_complete', { summary: 'work.txt is committed.' }]);
    return final('Noted.');
  });
  const orchard = await startOrchard(t, {
    defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }),
    databaseUrl: pg.url,
  });
  const teamId = uniqueId('team');
  await orchard.client.startTeam({ teamId, repo: makeRepo(), goal: 'Build it', members: [{ memberId: 'implementer', role: 'Implementer' }] });
  // The certification (the board read, the result branch, the certificate's transaction) meets the outage.
  await cutAfterCall(orchard.pool, pg, teamId, 'org_run_complete');
  const view = await untilTeam(orchard, teamId, 'delivered', (v) => v.certificate !== undefined, 150_000);
  t.is(view.candidate, 'certified');
  t.is((await orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).describe()).status.name, 'RUNNING');
  const certificates = await orchard.pool.query(`SELECT certificate->>'certificateId' AS id FROM team_certificates WHERE team_id = $1`, [teamId]);
  t.is(certificates.rowCount, 1, 'one certificate, however often the certification was retried');
  t.is(certificates.rows[0].id, view.certificate!.certificateId);
});
