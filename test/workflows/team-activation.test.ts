import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { closureInputOf, readBoard } from '../../activities/store/team';
import { validateClosure } from '../../workflows/team/closure';
import { calls, final, lastUserText } from '../helpers/fleet-model';
import { completion, stubModel, type Reply } from '../helpers/model-stub';
import { keepHistory, makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * Generations (issue 9): each activation of a team — the first run of a `team/<id>` chain — is a generation;
 * continue-as-new is the same activation, a team started again after its run closed is the next one, and the
 * evidence of the earlier generation is stale for the closure.
 */
const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const afterTool = (body: any) => body.messages.at(-1).role === 'tool';

function model(body: any): Reply {
  if (isCoordinator(body)) {
    if (afterTool(body) || !lastUserText(body).startsWith('Build')) return final('ok');
    return calls(['task_create', { taskId: 'write', title: 'Write', description: 'write it', owner: 'implementer' }], ['plan_approve', {}]);
  }
  if (afterTool(body)) return completion({ content: 'done' });
  return calls(['bash', { command: 'echo hi > out.txt' }]);
}

test('continue-as-new keeps the generation; a team started again after its run closed is the next generation, and its old evidence is stale', async (t) => {
  const stub = await stubModel(t, model);
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }) });
  const teamId = uniqueId('team');
  const start = { teamId, repo: makeRepo(), goal: 'Build it', members: [{ memberId: 'implementer', role: 'Implementer' }], limits: { turnsPerRun: 1 } };
  await orchard.client.startTeam(start);
  const handle = orchard.temporal.workflow.getHandle(`team/${teamId}`);
  await waitFor(
    async () => {
      const v = await orchard.client.teamStatus(teamId);
      return v.executions.some((e) => e.state === 'completed') ? v : undefined;
    },
    60_000,
    'the task completed',
  );
  // One turn per run: the next wake continues as new. Same activation, same generation.
  await orchard.client.teamMessage(teamId, { text: 'status?' });
  const firstRun = (await handle.describe()).runId;
  await waitFor(async () => ((await handle.describe()).runId !== firstRun ? true : undefined), 60_000, 'a continued run');
  const continued = await waitFor(
    async () => {
      const v = await orchard.client.teamStatus(teamId).catch(() => undefined);
      return v && v.turns.length >= 2 && v.status === 'waiting_for_org_event' ? v : undefined;
    },
    60_000,
    'the continued run settled',
  );
  t.is(continued.generation, 1);
  const before = await readBoard(orchard.pool, teamId);
  t.is(before.generation, 1);
  t.deepEqual(
    before.outputs.map((o) => o.generation),
    [1],
  );
  t.is(validateClosure(closureInputOf(before, 0)).outcome, 'delivered');
  await keepHistory(orchard, `team/${teamId}`, 'team-continued-as-new');
  const activations = async () =>
    Number((await orchard.pool.query(`SELECT count(*) AS n FROM team_facts WHERE team_id = $1 AND kind = 'activated'`, [teamId])).rows[0].n);
  t.is(await activations(), 1);

  // The run closes; the team is started again: a new activation.
  await handle.terminate('test: the run is gone');
  await orchard.client.startTeam(start);
  const again = await waitFor(
    async () => {
      const v = await orchard.client.teamStatus(teamId).catch(() => undefined);
      return v && v.generation === 2 ? v : undefined;
    },
    60_000,
    'the second activation',
  );
  t.is(again.generation, 2);
  const after = await readBoard(orchard.pool, teamId);
  t.is(after.generation, 2);
  t.is(await activations(), 2);
  // The first generation's output no longer proves anything.
  const closure = validateClosure(closureInputOf(after, 0));
  t.not(closure.outcome, 'delivered');
  t.true(closure.reasons.some((r) => r.code === 'stale_evidence'));
});
