import test, { type ExecutionContext } from 'ava';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpenAICompatibleProvider, openAIConfigFromEnv } from '../../activities/model/openai';
import { ModelError, type ModelErrorCode, type ModelRequest } from '../../activities/model/types';
import { readFileTool, writeFileTool } from '../../workflows/tools';

interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

type Reply = (received: Received, res: ServerResponse) => void;

/** A real Chat Completions endpoint on 127.0.0.1 that records every request's bytes and answers with `reply`. */
async function endpoint(t: ExecutionContext, reply: Reply): Promise<{ baseURL: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      received.push(request);
      reply(request, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const { port } = server.address() as AddressInfo;
  return { baseURL: `http://127.0.0.1:${port}/v1`, received };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

function completion(message: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'served-model',
    choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: 'stop' }],
    ...extra,
  };
}

const request: ModelRequest = {
  messages: [
    { role: 'system', content: 'You are a careful engineer.' },
    { role: 'user', content: 'Create NOTES.md' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '{"path":"a"}' } }],
    },
    { role: 'tool', content: 'no such file', tool_call_id: 'call_1' },
  ],
  tools: [readFileTool, writeFileTool],
};

async function modelError(t: ExecutionContext, promise: Promise<unknown>): Promise<ModelError> {
  const err = await t.throwsAsync(promise);
  if (!(err instanceof ModelError)) throw new Error(`expected a ModelError, got ${String(err)}`);
  return err;
}

test('sends the request as Chat Completions and parses tool calls, finish reason and usage', async (t) => {
  const server = await endpoint(t, (_req, res) =>
    json(
      res,
      200,
      completion(
        {
          content: 'Writing it.',
          tool_calls: [
            {
              id: 'call_9',
              type: 'function',
              function: { name: 'write_file', arguments: '{"path":"NOTES.md","content":"hi"}' },
            },
          ],
        },
        { usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150 } },
      ),
    ),
  );
  const provider = new OpenAICompatibleProvider({
    baseURL: server.baseURL,
    model: 'test-model',
    apiKey: 'sk-test-123',
    timeoutMs: 5_000,
  });
  const response = await provider.complete(request);

  t.is(server.received.length, 1);
  const [sent] = server.received;
  t.is(sent.method, 'POST');
  t.is(sent.url, '/v1/chat/completions');
  t.is(sent.headers.authorization, 'Bearer sk-test-123');
  const body = JSON.parse(sent.body);
  t.is(body.model, 'test-model');
  t.deepEqual(body.messages, request.messages);
  t.deepEqual(body.tools, [
    {
      type: 'function',
      function: { name: 'read_file', description: readFileTool.description, parameters: readFileTool.parameters },
    },
    {
      type: 'function',
      function: { name: 'write_file', description: writeFileTool.description, parameters: writeFileTool.parameters },
    },
  ]);
  t.false('stream' in body);

  t.is(provider.name, 'openai');
  t.deepEqual(response.message, {
    role: 'assistant',
    content: 'Writing it.',
    tool_calls: [
      {
        id: 'call_9',
        type: 'function',
        function: { name: 'write_file', arguments: '{"path":"NOTES.md","content":"hi"}' },
      },
    ],
  });
  t.is(response.finishReason, 'stop');
  t.deepEqual(response.usage, { promptTokens: 120, completionTokens: 30, totalTokens: 150 });
  t.is(response.model, 'served-model');
});

test('omits tools when there are none, honours the request model, and reports no usage (never zero) when absent', async (t) => {
  const server = await endpoint(t, (_req, res) => {
    const body = completion({ content: 'Done.' });
    delete body.model;
    json(res, 200, body);
  });
  const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'default', timeoutMs: 5_000 });
  const response = await provider.complete({ ...request, model: 'override', tools: [] });
  const body = JSON.parse(server.received[0].body);
  t.false('tools' in body);
  t.is(body.model, 'override');
  t.is(server.received[0].headers.authorization, undefined, 'a keyless endpoint gets no Authorization header');
  t.deepEqual(response.message, { role: 'assistant', content: 'Done.' });
  t.is(response.usage, undefined, 'absent usage is not read as 0 tokens: the call is charged its reservation');
  t.false('max_tokens' in body, 'no output cap is sent unless the caller has one');
  t.is(response.model, 'override');
});

test('a base URL with a trailing slash still posts to <base>/chat/completions', async (t) => {
  const server = await endpoint(t, (_req, res) => json(res, 200, completion({ content: 'ok' })));
  const provider = new OpenAICompatibleProvider({ baseURL: `${server.baseURL}/`, model: 'm', timeoutMs: 5_000 });
  await provider.complete(request);
  t.is(server.received[0].url, '/v1/chat/completions');
});

const httpStatusMaps = test.macro({
  async exec(t, status: number, code: ModelErrorCode, retryable: boolean) {
    const server = await endpoint(t, (_req, res) => json(res, status, { error: { message: `status ${status} from the test server`, type: 'test' } }));
    const provider = new OpenAICompatibleProvider({
      baseURL: server.baseURL,
      model: 'm',
      apiKey: 'k',
      timeoutMs: 5_000,
    });
    const err = await modelError(t, provider.complete(request));
    t.is(err.code, code);
    t.is(err.retryable, retryable);
    t.is(err.status, status);
    t.true(err.message.includes(`status ${status} from the test server`), err.message);
    t.is(server.received.length, 1, 'one attempt: retries belong to the activity retry policy');
  },
  title: (_title, status, code) => `HTTP ${status} is ${code}`,
});

test(httpStatusMaps, 429, 'model_rate_limited', true);
test(httpStatusMaps, 500, 'model_unavailable', true);
test(httpStatusMaps, 503, 'model_unavailable', true);
test(httpStatusMaps, 400, 'model_request_rejected', false);
test(httpStatusMaps, 404, 'model_request_rejected', false);
test(httpStatusMaps, 401, 'model_auth_failed', false);
test(httpStatusMaps, 403, 'model_auth_failed', false);

const malformedBody = test.macro({
  async exec(t, contentType: string, body: string, says: string) {
    const server = await endpoint(t, (_req, res) => {
      res.writeHead(200, { 'content-type': contentType });
      res.end(body);
    });
    const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'm', timeoutMs: 5_000 });
    const err = await modelError(t, provider.complete(request));
    t.is(err.code, 'model_response_malformed');
    t.false(err.retryable);
    t.true(err.message.includes(says), err.message);
  },
  title: (title) => `a response whose ${title} is model_response_malformed`,
});

test('body is HTML', malformedBody, 'text/html', '<html>Bad gateway</html>', 'not JSON');
test('body is truncated JSON', malformedBody, 'application/json', '{"choices": [', 'not JSON');
test('choices are empty', malformedBody, 'application/json', JSON.stringify(completion({}, { choices: [] })), 'choices');
test('choices are missing', malformedBody, 'application/json', JSON.stringify({ id: 'x' }), 'choices');
test('choice has no message', malformedBody, 'application/json', JSON.stringify({ choices: [{ index: 0, finish_reason: 'stop' }] }), 'choices[0].message');
test(
  'tool call lacks function.name',
  malformedBody,
  'application/json',
  JSON.stringify(completion({ tool_calls: [{ id: 'c', type: 'function', function: { arguments: '{}' } }] })),
  'choices[0].message.tool_calls[0].function.name',
);
test(
  'tool call arguments are not a string',
  malformedBody,
  'application/json',
  JSON.stringify(completion({ tool_calls: [{ id: 'c', type: 'function', function: { name: 'bash', arguments: {} } }] })),
  'choices[0].message.tool_calls[0].function.arguments',
);
test(
  'body is an error object with status 200',
  malformedBody,
  'application/json',
  JSON.stringify({ error: { message: 'model not loaded' } }),
  'model not loaded',
);

test('a response slower than the timeout is model_timeout, and the call returns at the deadline', async (t) => {
  const server = await endpoint(t, (_req, res) => {
    setTimeout(() => json(res, 200, completion({ content: 'late' })), 3_000).unref();
  });
  const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'm', timeoutMs: 200 });
  const started = Date.now();
  const err = await modelError(t, provider.complete(request));
  t.is(err.code, 'model_timeout');
  t.true(err.retryable);
  t.true(Date.now() - started < 2_000, `returned after ${Date.now() - started} ms`);
});

test('a body that stalls after the headers is model_timeout too', async (t) => {
  const server = await endpoint(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write('{"choices": [');
  });
  const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'm', timeoutMs: 300 });
  const err = await modelError(t, provider.complete(request));
  t.is(err.code, 'model_timeout');
  t.true(err.retryable);
});

test('a refused connection is model_unavailable and retryable', async (t) => {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const provider = new OpenAICompatibleProvider({
    baseURL: `http://127.0.0.1:${port}/v1`,
    model: 'm',
    timeoutMs: 5_000,
  });
  const err = await modelError(t, provider.complete(request));
  t.is(err.code, 'model_unavailable');
  t.true(err.retryable);
  t.true(err.message.includes(`127.0.0.1:${port}`), err.message);
});

test("the caller's abort surfaces as the signal's reason, not as a model failure", async (t) => {
  const controller = new AbortController();
  const reason = new Error('activity cancelled');
  // Cancelled while the server is still thinking.
  const server = await endpoint(t, () => controller.abort(reason));
  const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'm', timeoutMs: 5_000 });
  const err = await t.throwsAsync(provider.complete(request, controller.signal));
  t.is(err, reason);

  const already = new AbortController();
  already.abort(reason);
  t.is(await t.throwsAsync(provider.complete(request, already.signal)), reason);
  t.is(server.received.length, 1, 'an already-aborted call sends nothing');
});

test('the API key never appears in an error message, even when the server echoes it', async (t) => {
  const apiKey = 'sk-very-secret-key-0123456789';
  const server = await endpoint(t, (req, res) => json(res, 401, { error: { message: `Incorrect API key provided: ${req.headers.authorization}` } }));
  const provider = new OpenAICompatibleProvider({ baseURL: server.baseURL, model: 'm', apiKey, timeoutMs: 5_000 });
  const err = await modelError(t, provider.complete(request));
  t.is(err.code, 'model_auth_failed');
  t.false(err.message.includes(apiKey), err.message);
  t.false(String(err.stack).includes(apiKey));
  t.true(err.message.includes('[redacted]'));
});

test('openAIConfigFromEnv reads the ORCHARD_MODEL_* variables and is undefined without a URL', (t) => {
  t.is(openAIConfigFromEnv({}), undefined);
  t.deepEqual(
    openAIConfigFromEnv({
      ORCHARD_MODEL_URL: 'http://localhost:11434/v1',
      ORCHARD_MODEL: 'qwen2.5-coder',
      ORCHARD_MODEL_API_KEY: 'k',
      ORCHARD_MODEL_TIMEOUT_MS: '30000',
    }),
    { baseURL: 'http://localhost:11434/v1', model: 'qwen2.5-coder', apiKey: 'k', timeoutMs: 30_000 },
  );
  t.deepEqual(openAIConfigFromEnv({ ORCHARD_MODEL_URL: 'http://h/v1', ORCHARD_MODEL: 'm' }), {
    baseURL: 'http://h/v1',
    model: 'm',
    apiKey: undefined,
    timeoutMs: 120_000,
  });
  t.throws(() => openAIConfigFromEnv({ ORCHARD_MODEL_URL: 'http://h/v1' }), { message: /ORCHARD_MODEL must/ });
  const env = { ORCHARD_MODEL_URL: 'http://h/v1', ORCHARD_MODEL: 'm' };
  t.throws(() => openAIConfigFromEnv({ ...env, ORCHARD_MODEL_TIMEOUT_MS: 'soon' }), {
    message: /ORCHARD_MODEL_TIMEOUT_MS/,
  });
  t.throws(() => openAIConfigFromEnv({ ORCHARD_MODEL_URL: 'not a url', ORCHARD_MODEL: 'm' }), { message: /not a URL/ });
});
