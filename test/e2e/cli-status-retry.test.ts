import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import type { ModelProvider } from '../../activities/model/types';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/** A real Chat Completions endpoint that is down: every request is answered 503. */
let server: Server | undefined;
let provider: OpenAICompatibleProvider | undefined;
let requests = 0;
const endpointDown: ModelProvider = { name: 'openai', complete: (request, signal) => provider!.complete(request, signal) };

test.before(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests += 1;
      res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'upstream overloaded' } }));
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  provider = new OpenAICompatibleProvider({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, model: 'm', timeoutMs: 5000 });
});
test.after.always(() => new Promise<void>((resolve) => (server ? (server.closeAllConnections(), server.close(() => resolve())) : resolve())));

const shared = sharedOrchard(test, { defaultProvider: endpointDown });

test('while the model endpoint is down, session status shows the model call being retried: attempt and last error', async (t) => {
  t.timeout(120_000);
  const id = uniqueId('retrying');
  const env = workerEnv(shared());
  t.is((await runOrchard(['session', 'create', '--id', id, '--title', 'retry', '--repo', makeRepo(), '--task', 'hello'], env)).code, 0);
  const status = await waitFor(
    async () => {
      const run = await runOrchard(['session', 'status', id, '--json'], env);
      const view = JSON.parse(run.stdout) as { status: string; retrying?: { activity: string; attempt: number; lastError?: string }[] };
      return view.retrying?.find((r) => r.activity === 'modelStep' && r.attempt >= 2) ? view : undefined;
    },
    60_000,
    'a retried model call in the status',
  );
  t.is(status.status, 'progressing');
  const call = status.retrying!.find((r) => r.activity === 'modelStep')!;
  t.regex(call.lastError ?? '', /503|unavailable|overloaded/i);
  t.true(requests >= call.attempt - 1, `${requests} requests for attempt ${call.attempt}`);
  const text = await runOrchard(['session', 'status', id], env);
  t.regex(text.stdout, /\n {2}retrying modelStep: attempt \d+, last error: /);
  await shared().client.cancel(id);
});
