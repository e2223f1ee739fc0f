import test from 'ava';
import { sessionWorkflowId } from '../../contract/messages';
import { JUST_DISPATCHED, ROUTE_FIRST } from '../../workflows/orchestrator/echo';
import { calls, final, fleetModel, gate, lastUserText, session, startFleet, type Decide } from '../helpers/fleet-model';
import { completion } from '../helpers/model-stub';
import { waitFor } from '../helpers/wait';

/**
 * Completion coordination (issue 8, item 7), routing-metadata confirmation (item 4, invariant 6) and the
 * untrusted routing cache (item 8), against the real workflows with the model played over HTTP.
 */

const firstUserTexts = (requests: any[]) => requests.filter((b) => b.messages.at(-1).role === 'user').map((b) => String(b.messages.at(-1).content));

test('a group is delivered once, as one result, when every member is terminal; a late member is refused', async (t) => {
  const slow = gate();
  const decide: Decide = (ctx) => {
    if (ctx.results.length > 0) return final('ok');
    if (ctx.text === 'review it twice') {
      return calls(
        session('create', { title: 'reviewer one', task: 'review quickly', completionGroupId: 'review' }),
        session('create', { title: 'reviewer two', task: 'review [slow]', completionPolicy: 'group', completionGroupId: 'review' }),
      );
    }
    if (ctx.text === 'one more reviewer') return calls(session('create', { title: 'reviewer three', task: 'late', completionGroupId: 'review' }));
    if (ctx.text === 'a loner') return calls(session('create', { title: 'loner', task: 'alone', notifyOnComplete: true }));
    return final('noted');
  };
  const fleet = await startFleet(
    t,
    fleetModel(decide, async (body) => {
      if (lastUserText(body).includes('[slow]')) await slow.promise;
      return completion({ content: `finished: ${lastUserText(body)}` });
    }),
  );
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'review it twice' });
  const spawned = await fleet.settled(1);
  const [one, two] = spawned.children.map((c) => c.childId);
  // Both creates of the one step echo the roster; each marks only the child it created, the first as the second.
  const echoes = fleet.toolResults().filter((r) => r.startsWith('created child'));
  t.is(echoes.length, 2);
  for (const [i, echo] of echoes.entries()) {
    const marked = echo.split('\n').filter((line) => line.includes(JUST_DISPATCHED));
    t.is(marked.length, 1);
    t.true(marked[0].startsWith(`${[one, two][i]} | `));
    t.true(echo.includes(ROUTE_FIRST));
  }
  t.true(echoes[1].includes(`${one} | reviewer one`), 'the second echo lists the first child too');
  t.deepEqual(
    spawned.children.map((c) => c.completion),
    [
      { policy: 'group', groupId: 'review' },
      { policy: 'group', groupId: 'review' },
    ],
  );
  // The quick member is done; the group waits for the slow one and tells the model nothing yet.
  const waiting = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.groups[0]?.terminal.includes(one) ? v : undefined;
    },
    60_000,
    'the first member is terminal',
  );
  t.like(waiting.groups[0], { groupId: 'review', sealed: true, delivered: false, members: [one, two], openedTurn: 1 });

  await orchard.client.message(id, { text: 'one more reviewer' });
  const late = await fleet.settled(2);
  t.is(late.children.length, 2, 'no late member was created');
  t.truthy(fleet.toolResults().find((r) => r.startsWith('error (completion_group_sealed)')));
  t.false(
    firstUserTexts(fleet.orchestratorRequests()).some((text) => text.startsWith('Child results')),
    'nothing delivered while a member works',
  );

  slow.open();
  const delivered = await fleet.settled(3);
  t.true(delivered.groups[0].delivered);
  const manifests = firstUserTexts(fleet.orchestratorRequests()).filter((text) => text.startsWith('Child results'));
  t.is(manifests.length, 1);
  t.true(manifests[0].startsWith('Child results (1):\n- group review complete (2 results):'));
  t.true(manifests[0].includes(`  - ${one}: turn finished`));
  t.true(manifests[0].includes(`  - ${two}: turn finished`));

  // notifyOnComplete means each: the loner's result comes on its own.
  await orchard.client.message(id, { text: 'a loner' });
  const loner = await fleet.settled(5);
  const last = loner.children.at(-1)!;
  t.deepEqual(last.completion, { policy: 'each' });
  const all = firstUserTexts(fleet.orchestratorRequests()).filter((text) => text.startsWith('Child results'));
  t.is(all.length, 2);
  t.true(all[1].startsWith(`Child results (1):\n- ${last.childId}: turn finished`));
  await fleet.keepHistory('orchestrator-group-completion');
});

test('results arriving mid-turn coalesce into one manifest at the next idle; a user message at that moment goes first', async (t) => {
  const children = gate();
  const turn = gate();
  const decide: Decide = async (ctx) => {
    if (ctx.results.length > 0) return final('ok');
    if (ctx.text === 'two workers') {
      return calls(session('create', { title: 'worker a', task: 'task a [gated]' }), session('create', { title: 'worker b', task: 'task b [gated]' }));
    }
    if (ctx.text === 'think slowly') await turn.promise;
    return final('noted');
  };
  const fleet = await startFleet(
    t,
    fleetModel(decide, async (body) => {
      await children.promise;
      return completion({ content: `finished: ${lastUserText(body)}` });
    }),
  );
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'two workers' });
  const [a, b] = (await fleet.settled(1)).children.map((c) => c.childId);
  await orchard.client.message(id, { text: 'think slowly' });
  await waitFor(() => firstUserTexts(fleet.orchestratorRequests()).includes('think slowly') || undefined, 60_000, 'turn 2 is at the model');
  // Both children finish while turn 2 waits for the model; then the user speaks.
  children.open();
  await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(id);
      return v.children.every((c) => c.turnEnds === 1) || undefined;
    },
    60_000,
    'both turn ends counted',
  );
  await orchard.client.message(id, { text: 'and now this' });
  turn.open();
  const view = await fleet.settled(4);
  t.deepEqual(
    view.turns.map((r) => r.taskId),
    ['m1', 'm2', 'm3', 'm4'],
  );
  const texts = firstUserTexts(fleet.orchestratorRequests());
  t.deepEqual(texts.slice(0, 3), ['two workers', 'think slowly', 'and now this']);
  t.regex(texts[3], /^Child results \(2\):\n/);
  t.true(texts[3].includes(`- ${a}: turn finished`) && texts[3].includes(`- ${b}: turn finished`));
  t.is(texts.length, 4, 'one manifest for both');
});

test('a routing change needs a token from a later user message: the model cannot confirm it itself', async (t) => {
  let token = '';
  const decide: Decide = (ctx) => {
    const r = ctx.results;
    if (ctx.text === 'start') return r.length ? final('ok') : calls(session('create', { title: 'login', task: 'fix login', topic: 'login' }));
    const childId = /child=(\S+)/.exec(ctx.text)?.[1];
    if (ctx.text.startsWith('alias')) {
      if (r.length === 0) return calls(['update_orchestrator_agent_description', { sessionID: childId, routingAliases: ['auth flake'], confirmed: false }]);
      if (r.length === 1) {
        token = JSON.parse(r[0]).confirmationToken;
        // Self-confirmation, in the same turn: refused.
        return calls(['update_orchestrator_agent_description', { sessionID: childId, confirmed: true, confirmationToken: token }]);
      }
      return final('Please confirm.');
    }
    if (ctx.text.startsWith('confirm')) {
      if (r.length === 0)
        return calls(['update_orchestrator_agent_description', { sessionID: childId, confirmed: true, confirmationToken: 'confirm-00000000' }]);
      if (r.length === 1) {
        return calls(['update_orchestrator_agent_description', { sessionID: childId, routingAliases: ['other'], confirmed: true, confirmationToken: token }]);
      }
      if (r.length === 2) return calls(['update_orchestrator_agent_description', { sessionID: childId, confirmed: true, confirmationToken: token }]);
      if (r.length === 3) return calls(['update_orchestrator_agent_description', { sessionID: childId, confirmed: true, confirmationToken: token }]);
      return final('Done.');
    }
    if (ctx.text === 'route auth')
      return r.length ? final('ok') : calls(session('create', { title: 'auth', task: 'the auth flake again', topic: 'Auth_Flake' }));
    return final('?');
  };
  const fleet = await startFleet(t, fleetModel(decide));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'start' });
  const childId = (await fleet.settled(1)).children[0].childId;
  await orchard.client.message(id, { text: `alias child=${childId}` });
  const proposed = await fleet.settled(2);
  t.deepEqual(proposed.children[0].routingAliases, [], 'nothing changed');
  t.is(proposed.proposals[0].token, token);
  t.is(proposed.proposals[0].confirmedBy, undefined);
  const results = () => fleet.toolResults();
  t.like(JSON.parse(results()[1]), { status: 'confirmation_required', after: { routingAliases: ['auth flake'] } });
  t.regex(results()[2], /^error \(confirmation_not_from_user\)/);

  // The user's own message carries the token.
  const confirmMessage = await orchard.client.message(id, { text: `confirm child=${childId} yes, ${token}` });
  const confirmed = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.turns.some((turn) => turn.taskId === confirmMessage.messageId) ? v : undefined;
  }, 60_000);
  const r = results();
  t.regex(r[3], /^error \(confirmation_token_unknown\)/);
  t.regex(r[4], /^error \(confirmation_mismatch\)/);
  t.like(JSON.parse(r[5]), { status: 'applied', routingAliases: ['auth flake'], confirmedBy: confirmMessage.messageId });
  t.regex(r[6], /^error \(confirmation_token_unknown\)/, 'a token is spent once');
  t.deepEqual(confirmed.children[0].routingAliases, ['auth flake']);
  t.deepEqual(confirmed.proposals, []);

  // The alias routes: a create on that topic goes to the owner.
  const routeMessage = await orchard.client.message(id, { text: 'route auth' });
  const routed = await waitFor(async () => {
    const v = await orchard.client.orchestratorStatus(id);
    return v.turns.some((turn) => turn.taskId === routeMessage.messageId) ? v : undefined;
  }, 60_000);
  t.is(routed.children.length, 1);
  t.is(routed.deliveries.at(-1)?.via, 'topic');
  await fleet.keepHistory('orchestrator-confirmation-tokens');
});

test('the routing cache is a projection nobody trusts: a row without authority is listed untrusted and never routed to', async (t) => {
  const decide: Decide = (ctx) => {
    if (ctx.results.length > 0) return final('ok');
    if (ctx.text === 'start') return calls(session('create', { title: 'api', task: 'build the api', topic: 'api' }));
    if (ctx.text === 'who is there') return calls(['list_orchestrator_agents', {}]);
    if (ctx.text === 'send intruder') return calls(session('send', { sessionID: 'intruder-1', task: 'do what the cache says' }));
    if (ctx.text === 'create evil') return calls(session('create', { title: 'evil', task: 'x', topic: 'evil' }));
    return final('?');
  };
  const fleet = await startFleet(t, fleetModel(decide));
  const { orchard, id } = fleet;
  await orchard.client.message(id, { text: 'start' });
  const childId = (await fleet.settled(1)).children[0].childId;
  // The ledger is projected into Postgres.
  const projected = await waitFor(
    async () => {
      const { rows } = await orchard.pool.query('SELECT * FROM orchestrator_routing_cache WHERE orchestrator_id = $1', [id]);
      return rows.length === 1 && rows[0].status === 'idle' ? rows[0] : undefined;
    },
    60_000,
    'the cache row',
  );
  t.like(projected, { child_id: childId, title: 'api', topic_key: 'api' });
  // Someone writes to the cache: a row for a child the ledger never had, and a tampered row for the real one.
  await orchard.pool.query(
    `INSERT INTO orchestrator_routing_cache (orchestrator_id, child_id, title, agent, routing_aliases, status, ledger_clock)
     VALUES ($1, 'intruder-1', 'owner of everything', 'coder', '["evil"]', 'idle', 1000000)`,
    [id],
  );
  await orchard.pool.query(
    `UPDATE orchestrator_routing_cache SET routing_description = 'tampered', routing_aliases = '["evil"]' WHERE orchestrator_id = $1 AND child_id = $2`,
    [id, childId],
  );

  await orchard.client.message(id, { text: 'who is there' });
  await fleet.settled(2);
  const listed = JSON.parse(fleet.toolResults().at(-1)!);
  const by = Object.fromEntries(listed.map((row: any) => [row.childId, row]));
  t.like(by[childId], { actionable: true, liveness: 'alive', attachable: true, stale: false, reason: null, routingAliases: [], routingDescription: null });
  t.regex(by[childId].runtime, new RegExp(`^${sessionWorkflowId(childId)} run `));
  t.like(by['intruder-1'], { actionable: false, reason: 'routing_metadata_untrusted', liveness: 'dead', attachable: false });

  await orchard.client.message(id, { text: 'send intruder' });
  await orchard.client.message(id, { text: 'create evil' });
  const view = await fleet.settled(4);
  t.truthy(fleet.toolResults().find((r) => r.startsWith('error (session_not_found): no child intruder-1')));
  await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId('intruder-1')).describe());
  // The cache's alias routed nothing: "evil" got a child of its own.
  t.deepEqual(
    view.deliveries.map((d) => d.via),
    ['create', 'create'],
  );
  t.is(view.children.length, 2);
  await fleet.keepHistory('orchestrator-agents-and-cache');
});
