import { resolve } from 'node:path';
import test from 'ava';
import { formatBudgetDemo, runBudgetDemo } from '../../demos/budget';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { OrchardError } from '../../client/client';
import { orchestratorWorkflowId, sessionWorkflowId, teamWorkflowId } from '../../contract/messages';
import { calls, final, fleetModel, session } from '../helpers/fleet-model';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { keepHistory, makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/** Polls `probe` until `done` holds for what it answers. */
const until = <T>(probe: () => Promise<T>, done: (value: T) => boolean): Promise<T> =>
  waitFor(async () => {
    const value = await probe();
    return done(value) ? value : false;
  }, 60_000);

/** A Chat Completions reply whose usage says `total` tokens (or none at all). */
function costing(message: Record<string, unknown>, total: number | undefined, finish = 'stop'): Reply {
  const reply = completion(message, finish) as { status: number; body: any };
  if (total === undefined) delete reply.body.usage;
  else reply.body.usage = { prompt_tokens: total - 1, completion_tokens: 1, total_tokens: total };
  return reply;
}

const bash = (command: string) => ({ tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command }) } }] });

test('a call that would pass the budget is not sent: the turn ends budget_exhausted, the queue waits, and setBudget lets the session go on', async (t) => {
  const limit = 60_000;
  // The first call spends all but 10 tokens: the next call's reservation cannot fit.
  const stub = await stubModel(t, [costing(bash('echo spent'), limit - 10, 'tool_calls')]);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const sessionId = uniqueId('budget');
  await orchard.client.createSession({ sessionId, title: 'budget', repo: makeRepo(), task: 'first', budgetTokens: limit, limits: { maxOutputTokens: 100 } });

  const exhausted = await until(
    () => orchard.client.status(sessionId),
    (v) => v.turnsCompleted === 1,
  );
  t.is(exhausted.lastTurn?.outcome, 'budget_exhausted');
  t.is(exhausted.error?.code, 'budget_exhausted');
  t.is(exhausted.status, 'failed_open', 'the session stays open');
  t.deepEqual(exhausted.budget, { limit, spent: limit - 10, remaining: 10, exhausted: true });
  t.is(stub.requests.length, 1, 'the call that would pass the budget was never sent');
  t.is(stub.requests[0].body.max_tokens, 100, "the call's output cap is explicit in the request");
  const rows = await orchard.pool.query(`SELECT reserved_tokens, charged_tokens, total_tokens FROM model_calls WHERE session_id = $1`, [sessionId]);
  t.is(rows.rows.length, 1);
  t.is(rows.rows[0].charged_tokens, limit - 10);
  t.true(rows.rows[0].reserved_tokens > 100, 'the reservation counts the request as well as its output cap');

  // A task sent meanwhile waits for budget: no model call is made for it.
  await orchard.client.send(sessionId, { task: 'second', requestId: 'second' });
  await new Promise((r) => setTimeout(r, 1500));
  const waiting = await orchard.client.status(sessionId);
  t.is(waiting.queued, 1);
  t.is(waiting.turnsCompleted, 1);
  t.is(stub.requests.length, 1);

  // Lowering below what was spent is refused and changes nothing.
  const below = await t.throwsAsync(orchard.client.setBudget(sessionId, 100, 'too-low'));
  t.is((below as OrchardError).code, 'invalid_input');
  t.is((await orchard.client.status(sessionId)).budget?.limit, limit);

  stub.replies.push(costing({ content: 'went on' }, 500));
  const raised = await orchard.client.setBudget(sessionId, limit + 100_000, 'raise-1');
  t.is(raised.limit, limit + 100_000);
  t.falsy(raised.exhausted);
  // A repeat of the same request changes nothing again.
  // (The first answer, not the status: the queued task may already have run and spent since.)
  t.deepEqual(await orchard.client.setBudget(sessionId, limit + 100_000, 'raise-1'), raised);
  t.is((await orchard.client.status(sessionId)).budget?.limit, limit + 100_000);

  const after = await until(
    () => orchard.client.status(sessionId),
    (v) => v.turnsCompleted === 2,
  );
  t.is(after.lastTurn?.outcome, 'finished');
  t.deepEqual(after.budget, { limit: limit + 100_000, spent: limit - 10 + 500, remaining: 100_000 - 490 });
  t.is(stub.requests.length, 2);
  t.deepEqual(
    stub.requests[1].body.messages.filter((m: any) => m.role === 'user').map((m: any) => m.content),
    ['first', 'second'],
    'the session went on with its history',
  );
  await keepHistory(orchard, sessionWorkflowId(sessionId), 'session-budget-exhausted-raised');
});

test('a model that reports no usage is charged the reservation it made before the call', async (t) => {
  const stub = await stubModel(t, [costing({ content: 'no usage reported' }, undefined)]);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const sessionId = uniqueId('nousage');
  await orchard.client.createSession({ sessionId, title: 'no usage', repo: makeRepo(), task: 'hello', budgetTokens: 1_000_000 });
  const view = await until(
    () => orchard.client.status(sessionId),
    (v) => v.turnsCompleted === 1,
  );
  t.is(view.lastTurn?.outcome, 'finished');
  const { rows } = await orchard.pool.query(`SELECT reserved_tokens, charged_tokens, total_tokens FROM model_calls WHERE session_id = $1`, [sessionId]);
  t.is(rows[0].total_tokens, null, 'no usage is recorded as none, not as 0');
  const sent = stub.requests[0].body;
  // The reservation bounds the request it was made for: at least its bytes plus the output cap it sent.
  t.true(rows[0].reserved_tokens >= Buffer.byteLength(JSON.stringify(sent.messages)) + sent.max_tokens);
  t.is(rows[0].charged_tokens, rows[0].reserved_tokens);
  t.is(view.budget?.spent, rows[0].reserved_tokens);
});

test('a worker default budget applies to a session, an orchestrator and a team started without one', async (t) => {
  const stub = await stubModel(t, () => costing({ content: 'ok' }, 42));
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider, env: { ORCHARD_DEFAULT_BUDGET_TOKENS: '123456' } });
  const sessionId = uniqueId('default');
  await orchard.client.createSession({ sessionId, title: 'default budget', repo: makeRepo(), task: 'hello' });
  const view = await until(
    () => orchard.client.status(sessionId),
    (v) => v.turnsCompleted === 1,
  );
  t.deepEqual(view.budget, { limit: 123456, spent: 42, remaining: 123456 - 42 });
  t.is(typeof stub.requests[0].body.max_tokens, 'number');
  const orchestratorId = uniqueId('default-fleet');
  await orchard.client.startOrchestrator({ orchestratorId, repo: makeRepo() });
  const fleet = await until(
    () => orchard.client.orchestratorStatus(orchestratorId),
    (v) => v.budget?.limit !== undefined,
  );
  t.deepEqual(fleet.budget, { limit: 123456, spent: 0, escrowed: 0, remaining: 123456 });
  const teamId = uniqueId('default-team');
  await orchard.client.startTeam({ teamId, repo: makeRepo(), goal: 'Build it' });
  const team = await until(
    () => orchard.client.teamStatus(teamId),
    (v) => v.turns.length === 1,
  );
  t.deepEqual(team.budget, { limit: 123456, spent: 42, escrowed: 0, remaining: 123456 - 42 });
});

test("an orchestrator carves its children's budgets from its own, refuses what it cannot fund, and gets the escrow back when a child closes", async (t) => {
  const childBudget = 30_000;
  const model = fleetModel(
    (ctx) => {
      if (ctx.results.length > 0) return final('ok');
      if (ctx.text.startsWith('make A')) return calls(session('create', { title: 'child A', task: 'work A', budgetTokens: childBudget }));
      if (ctx.text.startsWith('make B')) return calls(session('create', { title: 'child B', task: 'work B', budgetTokens: 10_000_000 }));
      return final('nothing to do');
    },
    () => completion({ content: 'child done' }),
  );
  const stub = await stubModel(t, model);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const orchestratorId = uniqueId('fleet');
  const limit = 200_000;
  await orchard.client.startOrchestrator({ orchestratorId, repo: makeRepo(), title: 'fleet', budgetTokens: limit, limits: { maxOutputTokens: 50 } });

  const sent = await orchard.client.message(orchestratorId, { text: 'make A', requestId: 'a' });
  await orchard.client.waitForMessageTurn(orchestratorId, sent.messageId, { timeoutMs: 60_000 });
  const withA = await until(
    () => orchard.client.orchestratorStatus(orchestratorId),
    (v) => v.children.length === 1 && v.children[0].turnEnds > 0,
  );
  const childId = withA.children[0].childId;
  const child = await until(
    () => orchard.client.status(childId),
    (v) => v.turnsCompleted === 1,
  );
  t.is(child.budget?.limit, childBudget);
  t.is(child.budget?.fundedBy, orchestratorWorkflowId(orchestratorId));
  t.is(child.budget?.spent, 18, "the child's call spent what the model reported");
  // Every model call of the fleet was capped (the orchestrator's at its limit, the child's at the default).
  t.true(stub.requests.every((r) => typeof r.body.max_tokens === 'number'));
  const parent = withA.budget!;
  // The orchestrator's model was told what it carved and what remains.
  const echo = stub.requests.flatMap((r) => r.body.messages).find((m: any) => m.role === 'tool' && String(m.content).startsWith(`created child ${childId}`));
  t.regex(String(echo?.content), new RegExp(`budget ${childBudget} tokens carved from yours, \\d+ remain`));
  t.is(parent.limit, limit);
  t.is(parent.escrowed, childBudget - 18, 'what the child may still spend is held');
  t.is(parent.remaining, limit - parent.spent - parent.escrowed!);

  // A child it cannot fund is not created; the model reads the typed code.
  const sentB = await orchard.client.message(orchestratorId, { text: 'make B', requestId: 'b' });
  await orchard.client.waitForMessageTurn(orchestratorId, sentB.messageId, { timeoutMs: 60_000 });
  const afterB = await orchard.client.orchestratorStatus(orchestratorId);
  t.is(afterB.children.length, 1, 'no child B');
  const refusal = stub.requests.flatMap((r) => r.body.messages).find((m: any) => m.role === 'tool' && String(m.content).includes('budget_insufficient'));
  t.truthy(refusal, 'the orchestrator model was told budget_insufficient');

  // A child's raise is carved from its parent: within what remains it is granted, beyond it refused. (Once the
  // orchestrator is idle after its three turns — make A, child A's result, make B — so its own spend holds still.)
  const before = (
    await until(
      () => orchard.client.orchestratorStatus(orchestratorId),
      (v) => v.turnsCompleted >= 3 && v.status === 'idle',
    )
  ).budget!;
  const raised = await orchard.client.setBudget(childId, childBudget + 10_000, 'raise-a');
  t.is(raised.limit, childBudget + 10_000);
  const afterRaise = (await orchard.client.orchestratorStatus(orchestratorId)).budget!;
  t.is(afterRaise.escrowed, before.escrowed! + 10_000);
  t.is(afterRaise.remaining, before.remaining! - 10_000);
  const tooMuch = await t.throwsAsync(orchard.client.setBudget(childId, 10_000_000, 'raise-b'));
  t.is((tooMuch as OrchardError).code, 'budget_insufficient');
  t.is((await orchard.client.status(childId)).budget?.limit, childBudget + 10_000, 'a refused raise changes nothing');
  t.is((await orchard.client.orchestratorStatus(orchestratorId)).budget?.escrowed, afterRaise.escrowed);

  // The child closes: what it did not spend comes back to the parent.
  await orchard.client.cancel(childId, 'done with it');
  const returned = await until(
    () => orchard.client.orchestratorStatus(orchestratorId),
    (v) => v.budget?.escrowed === 0,
  );
  t.is(returned.budget!.remaining, limit - returned.budget!.spent);
  t.true(returned.budget!.spent >= 18 + parent.spent, "the fleet's spend counts the child's");
  await keepHistory(orchard, orchestratorWorkflowId(orchestratorId), 'orchestrator-budget-escrow');
});

test("a team's Coordinator stops at its budget until a raise wakes it; Members' session budgets are carved from the team's", async (t) => {
  const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
  const stub = await stubModel(t, (body) => {
    if (!isCoordinator(body)) return completion({ content: 'member done' });
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    if (messages.slice(lastUser + 1).some((m) => m.role === 'tool')) return final('ok');
    if (!String(messages[lastUser].content).includes('raised the token budget')) return final('noted');
    return calls(
      ['task_create', { taskId: 'implement', title: 'Implement it', description: 'Write it', owner: 'implementer' }],
      ['task_create', { taskId: 'test', title: 'Test it', description: 'Test it', owner: 'tester' }],
      ['plan_approve', {}],
    );
  });
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const teamId = uniqueId('team');
  await orchard.client.startTeam({ teamId, repo: makeRepo(), goal: 'Build it', budgetTokens: 1000, limits: { maxOutputTokens: 200 } });

  const stopped = await until(
    () => orchard.client.teamStatus(teamId),
    (v) => v.turns.length === 1,
  );
  t.is(stopped.turns[0].outcome, 'budget_exhausted');
  t.true(stopped.budget?.exhausted);
  t.is(stub.requests.length, 0, 'no Coordinator call was sent');

  const limit = 2_000_000;
  await orchard.client.setTeamBudget(teamId, limit, 'raise');
  const done = await until(
    () => orchard.client.teamStatus(teamId),
    (v) => v.executions.length === 2 && v.executions.every((e) => e.state === 'completed'),
  );
  t.true(
    stub.requests.every((r) => r.body.max_tokens !== undefined),
    'every call of the team was capped',
  );
  const members = await Promise.all(done.executions.map((e) => orchard.client.status(e.sessionId)));
  for (const m of members) {
    t.is(m.budget?.fundedBy, `team/${teamId}`);
    t.is(m.budget?.spent, 18);
  }
  // The first Member got a quarter of what remained; the second a quarter of what remained after that.
  const limits = members.map((m) => m.budget!.limit!).sort((a, b) => b - a);
  t.true(limits[0] > limits[1] && limits[0] <= limit / 4);
  const settled = await until(
    () => orchard.client.teamStatus(teamId),
    (v) => v.budget!.escrowed === limits[0] + limits[1] - 36,
  );
  t.is(settled.budget!.remaining, limit - settled.budget!.spent - settled.budget!.escrowed!);
  t.true(settled.budget!.spent > 36, "the team's spend counts the Coordinator's calls and the Members'");
  // A Member's raise is carved from the team's budget, through the team's fundChild; beyond what remains, refused.
  const member = members.find((m) => m.budget!.limit === limits[1])!;
  await orchard.client.setBudget(member.sessionId, limits[1] + 1000, 'member-raise');
  const afterRaise = await orchard.client.teamStatus(teamId);
  t.is(afterRaise.budget!.escrowed, settled.budget!.escrowed! + 1000);
  const refused = await t.throwsAsync(orchard.client.setBudget(member.sessionId, 10_000_000_000, 'member-too-much'));
  t.is((refused as OrchardError).code, 'budget_insufficient');
  t.is((await orchard.client.status(member.sessionId)).budget?.limit, limits[1] + 1000);
  await keepHistory(orchard, teamWorkflowId(teamId), 'team-budget-exhausted-raised');
});

test('the budget demo: a session refused for budget stays open, a task sent meanwhile waits, and a raise lets it run', async (t) => {
  const orchard = await startOrchard(t);
  const result = await runBudgetDemo(orchard.client, orchard.pool, {
    sessionId: uniqueId('budget-demo'),
    repo: makeRepo(),
    scenario: resolve(__dirname, '../../scenarios/budget.json'),
  });
  t.log(formatBudgetDemo(result));
  t.deepEqual(result.problems, []);
  t.deepEqual(
    result.stages.map((s) => s.outcome),
    ['finished', 'budget_exhausted', undefined, undefined, 'finished'],
  );
  t.is(result.callsPerTurn[1].calls, 0, 'the refused call was never sent');
  t.true(result.callsPerTurn[0].calls === 3 && result.callsPerTurn[2].calls === 2);
});

test("an orchestrator without a budget gives a child the budget its create asks for as the child's own: raising it asks no parent", async (t) => {
  const model = fleetModel(
    (ctx) => (ctx.results.length > 0 ? final('ok') : calls(session('create', { title: 'child C', task: 'work C', budgetTokens: 50_000 }))),
    () => completion({ content: 'child done' }),
  );
  const stub = await stubModel(t, model);
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 }) });
  const orchestratorId = uniqueId('free');
  await orchard.client.startOrchestrator({ orchestratorId, repo: makeRepo() });
  const sent = await orchard.client.message(orchestratorId, { text: 'make C', requestId: 'c' });
  await orchard.client.waitForMessageTurn(orchestratorId, sent.messageId, { timeoutMs: 60_000 });
  const childId = (await orchard.client.orchestratorStatus(orchestratorId)).children[0].childId;
  const child = await until(
    () => orchard.client.status(childId),
    (v) => v.turnsCompleted === 1,
  );
  t.deepEqual(child.budget, { limit: 50_000, spent: 18, remaining: 50_000 - 18 });
  t.is((await orchard.client.setBudget(childId, 60_000, 'own')).limit, 60_000);
  // Nothing was carved: the orchestrator counts its own two calls, and holds no escrow.
  t.deepEqual((await orchard.client.orchestratorStatus(orchestratorId)).budget, { spent: 36, escrowed: 0 });
});
