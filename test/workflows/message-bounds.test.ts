import test, { type ExecutionContext } from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { OrchardError, type OrchardClient } from '../../client/client';
import type { MessageResult, SessionLimits } from '../../contract/messages';
import { orchestratorWorkflowId, teamWorkflowId } from '../../contract/messages';
import { type Decide, final, fleetModel, gate, startFleet } from '../helpers/fleet-model';
import { completion, stubModel } from '../helpers/model-stub';
import { makeRepo, startOrchard, uniqueId, type TestOrchard } from '../helpers/orchard';
import { kib, knob, measureRunChain, TEMPORAL_LIMITS, type MeasuredRun } from '../helpers/run-chain';
import { waitFor } from '../helpers/wait';

/**
 * Issue 18, deliverable 4: orchestrator and team messages are bounded. Past a queue cap (or at a run's history
 * budget) a message is refused `queue_full` by the update's validator, so nothing of it reaches history or the
 * store; whatever was accepted is answered exactly once, across continue-as-new; and a team under constant load
 * still continues-as-new, carrying its pending wakes.
 *
 * Sizes are knobs (CI defaults below; raise them on a quiet machine):
 * - ORCHARD_BOUNDS_MESSAGES (1000): messages sent to the orchestrator while its first turn is held;
 * - ORCHARD_BOUNDS_QUEUE_CAP (200): the orchestrator's `maxQueuedTasks`;
 * - ORCHARD_BOUNDS_TURNS_PER_RUN (20): the orchestrator's `turnsPerRun`;
 * - ORCHARD_BOUNDS_HISTORY_BUDGET (1048576): the orchestrator's `historyBudgetBytes`;
 * - ORCHARD_BOUNDS_MESSAGE_BYTES (0): padding added to each orchestrator message (e.g. 1000 with a budget of 262144
 *   makes the history budget refuse before the cap does);
 * - ORCHARD_BOUNDS_BATCH (8): updates in flight at once (Temporal admits 10 per workflow);
 * - ORCHARD_BOUNDS_TEAM_CAP (20): the team's `maxQueuedTasks` in (b), which sends three times as many;
 * - ORCHARD_BOUNDS_TEAM_MESSAGES (24, at least 12): messages the busy team of (c) answers, half queued at once, half
 *   streamed.
 */
const MESSAGES = knob('ORCHARD_BOUNDS_MESSAGES', 1000);
const QUEUE_CAP = knob('ORCHARD_BOUNDS_QUEUE_CAP', 200);
const TURNS_PER_RUN = knob('ORCHARD_BOUNDS_TURNS_PER_RUN', 20);
const HISTORY_BUDGET = knob('ORCHARD_BOUNDS_HISTORY_BUDGET', 1024 * 1024);
const MESSAGE_BYTES = knob('ORCHARD_BOUNDS_MESSAGE_BYTES', 0, 0);
const BATCH = knob('ORCHARD_BOUNDS_BATCH', 8);
const TEAM_CAP = knob('ORCHARD_BOUNDS_TEAM_CAP', 20);
const TEAM_TURNS_PER_RUN = 3;
// At least enough that the first wave alone outlasts several runs.
const TEAM_MESSAGES = knob('ORCHARD_BOUNDS_TEAM_MESSAGES', 24, 4 * TEAM_TURNS_PER_RUN);

/** Generous: the machine is shared with a CI run; a passing wait ends at once. */
const WAIT_MS = 600_000;

const HOLD = 'think about this for a long while';
// Distinct, delimited markers: one never contains another, so each is found in a history only where it was written.
const textOf = (i: number, padding = 0) => `bounds message #${i}.${'~'.repeat(padding)}`;
const requestOf = (i: number) => `bounds-request-${i}.`;

/** The last message of each first-step request: the user's words (or a manifest, or a wake) a turn opened with. */
const openingTexts = (bodies: any[]) => bodies.filter((b) => b.messages.at(-1)?.role === 'user').map((b) => String(b.messages.at(-1).content));
const counts = (texts: string[]) => texts.reduce((m, text) => m.set(text, (m.get(text) ?? 0) + 1), new Map<string, number>());

interface Sent {
  accepted: Map<number, string>;
  refused: Map<number, string>;
}

/**
 * Sends messages `from..to-1` with their own request ids, `BATCH` at a time; a `queue_full` refusal is recorded
 * (with its reason), anything else fails the test.
 */
async function sendAll(
  send: (input: { text: string; requestId: string }) => Promise<MessageResult>,
  from: number,
  to: number,
  sent: Sent,
  padding = 0,
): Promise<void> {
  for (let start = from; start < to; start += BATCH) {
    const batch = Array.from({ length: Math.min(BATCH, to - start) }, (_, k) => start + k);
    await Promise.all(
      batch.map(async (i) => {
        try {
          const { messageId, duplicate } = await send({ text: textOf(i, padding), requestId: requestOf(i) });
          if (duplicate) throw new Error(`message ${i} answered as a duplicate`);
          sent.accepted.set(i, messageId);
        } catch (err) {
          if (!(err instanceof OrchardError) || err.code !== 'queue_full') throw err;
          sent.refused.set(i, err.message);
        }
      }),
    );
  }
}

/**
 * Describes the workflow (its current run) every 250 ms until stopped (at the latest by the test's teardown, before
 * the connection closes); any status but RUNNING is kept for the test to see. A describe that fails (a loaded
 * machine) says nothing about the workflow: it is counted, not judged.
 */
function watchRunning(t: ExecutionContext, orchard: TestOrchard, workflowId: string) {
  const seen: string[] = [];
  let looks = 0;
  let errors = 0;
  let stop = false;
  const done = (async () => {
    while (!stop) {
      try {
        const status = (await orchard.temporal.workflow.getHandle(workflowId).describe()).status.name;
        looks += 1;
        if (status !== 'RUNNING') seen.push(status);
      } catch {
        if (!stop) errors += 1;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const stopWatching = async () => {
    stop = true;
    await done;
    return { looks, errors, notRunning: seen };
  };
  t.teardown(stopWatching);
  return { stop: stopWatching };
}

/** The indices of every message marker (request id or text) written anywhere in these runs' histories. */
function markersIn(runs: MeasuredRun[]): Set<number> {
  const found = new Set<number>();
  for (const r of runs) for (const m of r.text.matchAll(/bounds-request-(\d+)\.|bounds message #(\d+)\./g)) found.add(Number(m[1] ?? m[2]));
  return found;
}

/** The chain's runs: every run but the current one continued-as-new, and the current one runs. */
function assertChain(t: ExecutionContext, runs: MeasuredRun[]) {
  t.deepEqual(
    runs.map((r) => r.status),
    [...runs.slice(0, -1).map(() => 'CONTINUED_AS_NEW'), 'RUNNING'],
    'every run handed over to the next, none failed or ended',
  );
}

function largest(runs: MeasuredRun[]) {
  const history = runs.reduce((a, b) => (b.encodedBytes > a.encodedBytes ? b : a));
  const inputs = runs.flatMap((r) => (r.continuedAsNew ? [r.continuedAsNew.inputBytes] : []));
  return { history, carried: inputs.length > 0 ? Math.max(...inputs) : 0 };
}

test.serial(
  'orchestrator: 1,000 messages during one long turn: past the cap refused queue_full and never written; every accepted one answered once, across continue-as-new',
  async (t) => {
    t.timeout(WAIT_MS + 120_000);
    const held = gate();
    const decide: Decide = async (ctx) => {
      if (ctx.text === HOLD) await held.promise;
      return final(`answered: ${ctx.text}`);
    };
    const limits: Partial<SessionLimits> = { maxQueuedTasks: QUEUE_CAP, turnsPerRun: TURNS_PER_RUN, historyBudgetBytes: HISTORY_BUDGET };
    const fleet = await startFleet(t, fleetModel(decide), { limits });
    const { orchard, id } = fleet;
    const workflowId = orchestratorWorkflowId(id);
    const running = watchRunning(t, orchard, workflowId);

    await orchard.client.message(id, { text: HOLD, requestId: 'hold' });
    await waitFor(() => openingTexts(fleet.orchestratorRequests()).includes(HOLD), 120_000, 'the long turn at the model');

    const started = Date.now();
    const sent: Sent = { accepted: new Map(), refused: new Map() };
    await sendAll((m) => orchard.client.message(id, m), 0, MESSAGES, sent, MESSAGE_BYTES);
    const sendMs = Date.now() - started;
    const byCap = [...sent.refused.values()].filter((m) => m.includes('messages queued')).length;
    const byBudget = [...sent.refused.values()].filter((m) => m.includes('history budget')).length;
    t.log(
      `${MESSAGES} messages sent in ${sendMs} ms during the held turn: ${sent.accepted.size} accepted, ${sent.refused.size} refused queue_full (${byCap} at the cap of ${QUEUE_CAP}, ${byBudget} at the history budget)`,
    );

    t.is(sent.accepted.size + sent.refused.size, MESSAGES);
    t.is(byCap + byBudget, sent.refused.size, 'every refusal says why: the cap or the budget');
    t.true(sent.accepted.size > 0, 'messages are accepted up to the cap');
    t.true(sent.accepted.size <= QUEUE_CAP, `no more than the cap is queued (${sent.accepted.size} accepted)`);
    if (byBudget === 0) t.is(sent.accepted.size, QUEUE_CAP, 'refusals begin exactly at the cap');
    t.is(new Set(sent.accepted.values()).size, sent.accepted.size, 'each accepted message has its own id');

    // While the turn is still held: everything accepted is queued, and only that is stored.
    const during = await orchard.client.orchestratorStatus(id);
    t.is(during.queued, sent.accepted.size);
    t.is(during.turnsCompleted, 0);
    const stored = new Map(
      (await orchard.pool.query(`SELECT request_id, task_id FROM session_tasks WHERE session_id = $1 AND request_id LIKE 'bounds-request-%'`, [id])).rows.map(
        (r) => [r.request_id as string, r.task_id as string],
      ),
    );
    t.is(stored.size, sent.accepted.size, 'one stored row per accepted message');
    for (const [i, messageId] of sent.accepted) t.is(stored.get(requestOf(i)), messageId);
    t.deepEqual(
      [...sent.refused.keys()].filter((i) => stored.has(requestOf(i))),
      [],
      'no refused message has a session_tasks row',
    );

    held.open();
    const expectedTurns = 1 + sent.accepted.size;
    const view = await waitFor(
      async () => {
        const v = await orchard.client.orchestratorStatus(id);
        return v.turnsCompleted >= expectedTurns && v.status === 'idle' ? v : undefined;
      },
      WAIT_MS,
      `${expectedTurns} turns answered`,
    );
    t.log(`${expectedTurns} turns ran in ${Date.now() - started - sendMs} ms after the gate opened; runIndex ${view.runIndex}`);
    t.is(view.turnsCompleted, expectedTurns, 'one turn per accepted message (and the held one), no more');
    t.is(view.queued, 0);

    // Answered exactly once: each accepted message opened one turn at the model, a refused one none.
    const opened = counts(openingTexts(fleet.orchestratorRequests()));
    t.deepEqual(
      [...sent.accepted.keys()].filter((i) => opened.get(textOf(i, MESSAGE_BYTES)) !== 1),
      [],
      'every accepted message opens exactly one turn',
    );
    t.deepEqual(
      [...sent.refused.keys()].filter((i) => opened.has(textOf(i, MESSAGE_BYTES))),
      [],
      'no refused message reaches the model',
    );
    // …and in the transcript: one user entry, in one turn, per accepted message id.
    const transcript = new Map(
      (
        await orchard.pool.query(
          `SELECT task_id, count(*)::int AS n, count(DISTINCT turn_id)::int AS turns FROM transcript_entries WHERE session_id = $1 AND role = 'user' GROUP BY task_id`,
          [id],
        )
      ).rows.map((r) => [r.task_id as string, [r.n, r.turns]]),
    );
    t.deepEqual(
      [...sent.accepted.values()].filter((m) => JSON.stringify(transcript.get(m)) !== '[1,1]'),
      [],
      'one transcript user entry per accepted message',
    );

    const { looks, errors, notRunning } = await running.stop();
    t.deepEqual(notRunning, [], `the orchestrator was RUNNING at every look (${looks}; ${errors} describe calls failed)`);
    t.log(`described while it worked: RUNNING at all ${looks} looks (${errors} describe calls failed)`);
    if (expectedTurns > TURNS_PER_RUN) t.true(view.runIndex >= 1, 'it continued-as-new past its turn bound');

    const runs = await measureRunChain(orchard.temporal, workflowId);
    assertChain(t, runs);
    t.is(runs.length, view.runIndex + 1);
    // Refused messages left nothing in any run's history: neither their update nor their text.
    const inHistory = markersIn(runs);
    t.deepEqual(
      [...sent.refused.keys()].filter((i) => inHistory.has(i)),
      [],
      'no refused message in history',
    );
    t.deepEqual(
      [...sent.accepted.keys()].filter((i) => !inHistory.has(i)),
      [],
      'every accepted message is in history',
    );

    const { history, carried } = largest(runs);
    t.log(
      `orchestrator, ${runs.length} runs: largest run history ${kib(history.encodedBytes)} encoded (${kib(history.serverBytes)} by the server), ${history.events} events; ` +
        `largest continue-as-new input ${kib(carried)}; limits ${kib(TEMPORAL_LIMITS.historyBytes)}, ${TEMPORAL_LIMITS.historyEvents} events, ${kib(TEMPORAL_LIMITS.payloadBytes)} per payload`,
    );
    // The run's own bound: its budget, plus what the updates in flight when it was reached carry (each text twice:
    // the update and its store activity's input), plus one turn's events.
    const bound = HISTORY_BUDGET + 2 * BATCH * (MESSAGE_BYTES + 100) + 512 * 1024;
    t.true(history.serverBytes <= bound, `the largest run's history (${history.serverBytes} bytes) is within its budget's bound (${bound})`);
    t.true(
      history.encodedBytes < TEMPORAL_LIMITS.historyBytes / 10 && history.serverBytes < TEMPORAL_LIMITS.historyBytes / 10,
      'largest history well under 50 MB',
    );
    t.true(Math.max(...runs.map((r) => r.events)) < TEMPORAL_LIMITS.historyEvents / 10, 'largest history well under 51,200 events');
    t.true(carried < TEMPORAL_LIMITS.payloadBytes / 4, 'largest carried input well under 2 MB');
  },
);

/** A team whose Coordinator answers every wake with one plain reply; its first turn (the goal) is held until `held.open()`. */
async function startTeam(t: ExecutionContext, limits: Partial<SessionLimits>) {
  const goal = `Hold the first turn ${uniqueId('goal')}`;
  const held = gate();
  const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
  const stub = await stubModel(t, async (body) => {
    const last = body.messages.at(-1);
    if (!isCoordinator(body) || last?.role !== 'user') return completion({ content: 'noted' });
    if (String(last.content) === goal) await held.promise;
    return final(`answered: ${String(last.content).slice(0, 40)}`);
  });
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }) });
  const teamId = uniqueId('team');
  await orchard.client.startTeam({ teamId, repo: makeRepo(), goal, members: [{ memberId: 'implementer', role: 'Implementer' }], limits });
  const coordinatorRequests = () => stub.requests.map((r) => r.body).filter(isCoordinator);
  await waitFor(() => openingTexts(coordinatorRequests()).includes(goal), 120_000, 'the goal turn at the model');
  return { orchard, teamId, held, coordinatorRequests };
}

/** Waits until every message in `sent.accepted` has been answered by a Coordinator turn and the team is idle. */
async function allAnswered(orchard: TestOrchard, teamId: string, coordinatorRequests: () => any[], sent: Sent) {
  return waitFor(
    async () => {
      const opened = counts(openingTexts(coordinatorRequests()));
      if (![...sent.accepted.keys()].every((i) => opened.has(textOf(i)))) return undefined;
      const v = await orchard.client.teamStatus(teamId);
      return v.status === 'waiting_for_org_event' && v.queuedMessages === 0 ? v : undefined;
    },
    WAIT_MS,
    `${sent.accepted.size} team messages answered`,
  );
}

/** Each accepted message opened exactly one Coordinator turn (at the model, and in the transcript); a refused one none. */
async function answeredOnce(t: ExecutionContext, orchard: TestOrchard, teamId: string, coordinatorRequests: () => any[], sent: Sent) {
  const opened = counts(openingTexts(coordinatorRequests()));
  t.deepEqual(
    [...sent.accepted.keys()].filter((i) => opened.get(textOf(i)) !== 1),
    [],
    'every accepted message opens exactly one Coordinator turn',
  );
  t.deepEqual(
    [...sent.refused.keys()].filter((i) => opened.has(textOf(i))),
    [],
    'no refused message reaches the Coordinator',
  );
  const transcript = new Map(
    (
      await orchard.pool.query(
        `SELECT task_id, count(*)::int AS n, count(DISTINCT turn_id)::int AS turns FROM transcript_entries WHERE session_id = $1 AND role = 'user' GROUP BY task_id`,
        [teamId],
      )
    ).rows.map((r) => [r.task_id as string, [r.n, r.turns]]),
  );
  t.deepEqual(
    [...sent.accepted.values()].filter((m) => JSON.stringify(transcript.get(m)) !== '[1,1]'),
    [],
    'one transcript user entry per accepted message',
  );
  return transcript;
}

test.serial('team: messages past its queue cap are refused queue_full and never written; every accepted one is answered once', async (t) => {
  t.timeout(WAIT_MS + 120_000);
  const { orchard, teamId, held, coordinatorRequests } = await startTeam(t, { maxQueuedTasks: TEAM_CAP });
  const client: OrchardClient = orchard.client;
  const running = watchRunning(t, orchard, teamWorkflowId(teamId));

  const sent: Sent = { accepted: new Map(), refused: new Map() };
  await sendAll((m) => client.teamMessage(teamId, m), 0, 3 * TEAM_CAP, sent);
  t.log(`team: ${3 * TEAM_CAP} messages during the held turn: ${sent.accepted.size} accepted, ${sent.refused.size} refused queue_full`);
  t.is(sent.accepted.size, TEAM_CAP, 'accepted up to the cap');
  t.is(sent.refused.size, 2 * TEAM_CAP, 'refused past it');
  t.true(
    [...sent.refused.values()].every((m) => m.includes(`(limit ${TEAM_CAP})`)),
    'refused for the queue cap',
  );
  t.true([...sent.accepted.values()].every((m) => /^u\d+$/.test(m)));

  const during = await client.teamStatus(teamId);
  t.is(during.queuedMessages, TEAM_CAP);
  const stored = new Set(
    (await orchard.pool.query(`SELECT request_id FROM session_tasks WHERE session_id = $1 AND request_id LIKE 'bounds-request-%'`, [teamId])).rows.map(
      (r) => r.request_id as string,
    ),
  );
  t.is(stored.size, TEAM_CAP, 'one stored row per accepted message');
  t.deepEqual(
    [...sent.refused.keys()].filter((i) => stored.has(requestOf(i))),
    [],
    'no refused message has a session_tasks row',
  );

  held.open();
  await allAnswered(orchard, teamId, coordinatorRequests, sent);
  await answeredOnce(t, orchard, teamId, coordinatorRequests, sent);
  const { looks, errors, notRunning } = await running.stop();
  t.deepEqual(notRunning, [], `the team was RUNNING at every look (${looks}; ${errors} describe calls failed)`);

  const runs = await measureRunChain(orchard.temporal, teamWorkflowId(teamId));
  assertChain(t, runs);
  const inHistory = markersIn(runs);
  t.deepEqual(
    [...sent.refused.keys()].filter((i) => inHistory.has(i)),
    [],
    'no refused message in history',
  );
});

test.serial('a busy team continues-as-new at its turn bound with a wake always pending, carrying its wakes: every message answered once', async (t) => {
  t.timeout(WAIT_MS + 120_000);
  const { orchard, teamId, held, coordinatorRequests } = await startTeam(t, { turnsPerRun: TEAM_TURNS_PER_RUN });
  const client: OrchardClient = orchard.client;
  const workflowId = teamWorkflowId(teamId);
  const running = watchRunning(t, orchard, workflowId);
  const sent: Sent = { accepted: new Map(), refused: new Map() };
  const firstWave = Math.ceil(TEAM_MESSAGES / 2);

  // Half queued while the goal turn is held: a wake is pending at every turn boundary of several runs.
  await sendAll((m) => client.teamMessage(teamId, m), 0, firstWave, sent);
  t.is((await client.teamStatus(teamId)).queuedMessages, firstWave);
  held.open();
  // The other half streams in, one at a time, while the team works through the first.
  for (let i = firstWave; i < TEAM_MESSAGES; i++) {
    const { messageId } = await client.teamMessage(teamId, { text: textOf(i), requestId: requestOf(i) });
    sent.accepted.set(i, messageId);
    await new Promise((r) => setTimeout(r, 100));
  }
  t.is(sent.refused.size, 0);
  const view = await allAnswered(orchard, teamId, coordinatorRequests, sent);
  const transcript = await answeredOnce(t, orchard, teamId, coordinatorRequests, sent);
  const { looks, errors, notRunning } = await running.stop();
  t.deepEqual(notRunning, [], `the team was RUNNING at every look (${looks}; ${errors} describe calls failed)`);

  const runs = await measureRunChain(orchard.temporal, workflowId);
  assertChain(t, runs);
  // Turns per run, from the turn count each run carried to the next (and the current run's status).
  const carried = runs.flatMap((r) =>
    r.continuedAsNew ? [r.continuedAsNew.input as { carried: { turnsCompleted: number; wake: { userMessages: { messageId: string }[] } } }] : [],
  );
  const ends = [...carried.map((c) => c.carried.turnsCompleted), view.turns.at(-1)?.turn ?? 0];
  const perRun = ends.map((end, k) => end - (k === 0 ? 0 : ends[k - 1]));
  const pendingAtHandover = carried.map((c) => c.carried.wake.userMessages.length);
  const { history, carried: largestInput } = largest(runs);
  t.log(
    `busy team: ${TEAM_MESSAGES + 1} user messages, ${ends.at(-1)} Coordinator turns in ${runs.length} runs (turns per run ${perRun.join(', ')}); ` +
      `user messages carried at each hand-over: ${pendingAtHandover.join(', ')}; largest run history ${kib(history.encodedBytes)}, ${history.events} events; largest carried input ${kib(largestInput)}`,
  );
  t.true(runs.length >= Math.ceil(firstWave / TEAM_TURNS_PER_RUN), `the run chain advanced under load (${runs.length} runs)`);
  t.deepEqual(
    perRun.filter((n) => n > TEAM_TURNS_PER_RUN),
    [],
    `no run did more than ${TEAM_TURNS_PER_RUN} Coordinator turns`,
  );
  t.true(
    pendingAtHandover.some((n) => n > 0),
    'it handed over with user messages still waiting',
  );
  // Nothing carried was lost: every message a hand-over carried was answered, once, in a later run.
  const carriedIds = new Set(carried.flatMap((c) => c.carried.wake.userMessages.map((m) => m.messageId)));
  t.deepEqual(
    [...carriedIds].filter((m) => JSON.stringify(transcript.get(m)) !== '[1,1]'),
    [],
    'every carried message answered once',
  );
  t.true(largestInput < TEMPORAL_LIMITS.payloadBytes / 4);
});
