import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { completion, stubModel } from '../helpers/model-stub';
import { makeRepo, startOrchard, uniqueId } from '../helpers/orchard';

test('a 429 from the provider is retried by the activity retry policy and the turn completes', async (t) => {
  const stub = await stubModel(t, [
    { status: 429, body: { error: { message: 'slow down' } } },
    completion({ tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'bash', arguments: '{"command":"echo from-the-tool"}' } }] }, 'tool_calls'),
    completion({ content: 'all done' }),
  ]);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', apiKey: 'sk-test-key', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const sessionId = uniqueId('openai');
  await orchard.client.createSession({ sessionId, title: 'openai', repo: makeRepo(), task: 'say hi' });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.lastTurn?.outcome, 'finished');
  t.is(view.lastTurn?.finalExcerpt, 'all done');
  t.is(stub.requests.length, 3);
  // The retry sent the same request again; the key went only into the header.
  t.deepEqual(stub.requests[1].body, stub.requests[0].body);
  t.is(stub.requests[0].headers.authorization, 'Bearer sk-test-key');
  t.deepEqual(
    stub.requests[0].body.tools.map((tool: any) => tool.function.name),
    ['bash', 'read_file', 'write_file', 'git_status', 'git_diff', 'git_commit'],
  );
  t.deepEqual(stub.requests[0].body.messages.slice(1), [{ role: 'user', content: 'say hi' }]);
  const toolMessage = stub.requests[2].body.messages.find((m: any) => m.role === 'tool');
  t.is(toolMessage.tool_call_id, 'call_1');
  t.regex(toolMessage.content, /from-the-tool/);
  const usage = await orchard.pool.query(`SELECT provider, model, total_tokens FROM model_calls WHERE session_id = $1 ORDER BY step`, [sessionId]);
  t.deepEqual(usage.rows, [
    { provider: 'openai', model: 'stub-model', total_tokens: 18 },
    { provider: 'openai', model: 'stub-model', total_tokens: 18 },
  ]);
});

test('a malformed provider response fails the turn with a typed error and a later send recovers', async (t) => {
  const stub = await stubModel(t, [{ status: 200, body: { id: 'x', choices: [] } }]);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 5000 });
  const orchard = await startOrchard(t, { defaultProvider: provider });
  const sessionId = uniqueId('malformed');
  await orchard.client.createSession({ sessionId, title: 'malformed', repo: makeRepo(), task: 'first' });
  const failed = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(failed.status, 'failed_open');
  t.is(failed.lastTurn?.outcome, 'failed');
  t.is(failed.error?.code, 'model_response_malformed');
  t.is(stub.requests.length, 1, 'a malformed response is not retried');

  stub.replies.push(completion({ content: 'recovered' }));
  await orchard.client.send(sessionId, 'second');
  const recovered = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 2 });
  t.is(recovered.status, 'idle');
  t.is(recovered.lastTurn?.finalExcerpt, 'recovered');
  // The failed turn's task is still in the history the model sees.
  t.deepEqual(
    stub.requests[1].body.messages.filter((m: any) => m.role === 'user').map((m: any) => m.content),
    ['first', 'second'],
  );
});
