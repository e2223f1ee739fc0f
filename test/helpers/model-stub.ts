import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A scripted reply; `hang` holds the request open until the client gives up (aborts or times out). */
export type Reply = { status: number; body: unknown } | { hang: true };

export interface ModelStub {
  url: string;
  requests: { headers: IncomingMessage['headers']; body: any }[];
  replies: Reply[];
  /** Requests that were held open and then closed by the client. */
  abandoned: number;
  /** Resolves when the n-th request (1-based) has arrived. */
  arrived(n: number): Promise<void>;
}

/**
 * A local server speaking the Chat Completions wire protocol, answering from a script of replies, or from a
 * function of the request body (a scripted model that decides only from the bytes it receives).
 */
export async function stubModel(t: { teardown(fn: () => unknown): void }, replies: Reply[] | ((body: any) => Reply | Promise<Reply>)): Promise<ModelStub> {
  const waiters: { n: number; resolve: () => void }[] = [];
  const stub: ModelStub = {
    url: '',
    requests: [],
    replies: Array.isArray(replies) ? replies : [],
    abandoned: 0,
    arrived: (n) =>
      new Promise<void>((resolve) => {
        if (stub.requests.length >= n) resolve();
        else waiters.push({ n, resolve });
      }),
  };
  const open = new Set<ServerResponse>();
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    // Decoded once, whole: a chunk may end inside a multi-byte character.
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      stub.requests.push({ headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
      for (const w of waiters.filter((w) => stub.requests.length >= w.n)) w.resolve();
      const body = stub.requests[stub.requests.length - 1].body;
      void Promise.resolve(
        stub.replies.shift() ?? (typeof replies === 'function' ? replies(body) : { status: 500, body: { error: { message: 'script exhausted' } } }),
      ).then((reply) => answer(res, reply));
    });
  });
  function answer(res: ServerResponse, reply: Reply): void {
    if ('hang' in reply) {
      open.add(res);
      res.on('close', () => {
        open.delete(res);
        stub.abandoned += 1;
      });
      return;
    }
    res.writeHead(reply.status, { 'content-type': 'application/json' });
    res.end(typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body));
  }
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(
    () =>
      new Promise<void>((r) => {
        for (const res of open) res.destroy();
        server.close(() => r());
      }),
  );
  stub.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return stub;
}

/** A Chat Completions response carrying `message`. */
export const completion = (message: Record<string, unknown>, finish = 'stop'): Reply => ({
  status: 200,
  body: {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 0,
    model: 'stub-model',
    choices: [{ index: 0, message: { role: 'assistant', content: null, ...message }, finish_reason: finish }],
    usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
  },
});
