import { resolve } from 'node:path';
import test from 'ava';
import { OpenAICompatibleProvider, openAIConfigFromEnv } from '../../activities/model/openai';
import type { OrchestratorStatusView } from '../../contract/messages';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * The live suite (issue 8, item 12): a real model plays the orchestrator, and the assertions are on the tool calls
 * it emitted, as the workflow executed them (its deliveries and ledger). Never part of `npm test` or CI: run it
 * with `ORCHARD_LIVE=1 ORCHARD_MODEL_URL=… ORCHARD_MODEL=… [ORCHARD_MODEL_API_KEY=…] npm run test:live`.
 * The children answer from a scripted scenario, so only the orchestrator's decisions cost model calls.
 */
const config = process.env.ORCHARD_LIVE === '1' ? openAIConfigFromEnv() : undefined;
const why = process.env.ORCHARD_LIVE !== '1' ? 'ORCHARD_LIVE=1 is not set' : 'ORCHARD_MODEL_URL and ORCHARD_MODEL are not set';
/** Each live test, or the same test skipped with the reason in its title (ava prints skipped titles). */
const live = (title: string, fn: (t: import('ava').ExecutionContext) => Promise<void>) =>
  config ? test.serial(title, fn) : test.serial.skip(`${title} [skipped: ${why}]`, fn);

const CHILD_MODEL = { provider: 'scripted' as const, scenario: resolve(__dirname, 'child-ack.json') };

async function fleet(t: import('ava').ExecutionContext) {
  const orchard = await startOrchard(t, { defaultProvider: new OpenAICompatibleProvider(config!) });
  const id = uniqueId('live');
  await orchard.client.startOrchestrator({ orchestratorId: id, repo: makeRepo(), title: 'a web shop', childModel: CHILD_MODEL });
  /** Sends a user message and returns the orchestrator's state once that message's turn has ended. */
  const say = async (text: string): Promise<{ view: OrchestratorStatusView; messageId: string }> => {
    const { messageId } = await orchard.client.message(id, { text });
    const view = await waitFor(
      async () => {
        const v = await orchard.client.orchestratorStatus(id);
        return v.turns.some((turn) => turn.taskId === messageId) ? v : undefined;
      },
      110_000,
      `the turn answering ${messageId}`,
    );
    return { view, messageId };
  };
  return { orchard, id, say };
}

const deliveredFor = (view: OrchestratorStatusView, messageId: string) => view.deliveries.filter((d) => d.messageId === messageId);

live('routes a follow-up to the existing owner and recognises a paraphrased topic', async (t) => {
  const { say } = await fleet(t);
  const first = await say('PR 1741: the login test is flaky on CI. Please get someone to fix it.');
  t.is(first.view.children.length, 1, 'the first request created one child');
  const owner = first.view.children[0].childId;
  const follow = await say('On PR 1741, also add a retry around the login call.');
  t.deepEqual(
    deliveredFor(follow.view, follow.messageId).map((d) => d.childId),
    [owner],
  );
  const paraphrase = await say('That flaky sign-in test we talked about: it failed again on main, have a look.');
  t.deepEqual(
    deliveredFor(paraphrase.view, paraphrase.messageId).map((d) => d.childId),
    [owner],
  );
  t.is(paraphrase.view.children.length, 1, 'no second child for the same topic');
});

live('dispatches on a raw symptom report without asking first', async (t) => {
  const { say } = await fleet(t);
  const report = await say("Customers get HTTP 500 on /checkout since this morning's deploy. Stack trace ends in PriceFormatter.round.");
  t.true(deliveredFor(report.view, report.messageId).length >= 1, 'the model dispatched work in the same turn');
});
