import test from 'ava';
import { once } from 'node:events';
import { connect } from 'node:net';
import { completion, stubModel } from '../helpers/model-stub';

test('the stub model reads a request body whose multi-byte character arrives split across two reads', async (t) => {
  const stub = await stubModel(t, [completion({ content: 'ok' })]);
  const text = 'route — then … done';
  const body = Buffer.from(JSON.stringify({ messages: [{ role: 'user', content: text }] }));
  // Inside the three bytes of the dash: the server's first read ends mid-character.
  const cut = body.indexOf(Buffer.from('—')) + 1;
  const socket = connect(Number(new URL(stub.url).port), '127.0.0.1');
  await once(socket, 'connect');
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
  );
  socket.write(body.subarray(0, cut));
  await new Promise((r) => setTimeout(r, 100));
  socket.end(body.subarray(cut));
  let answer = '';
  socket.on('data', (c: Buffer) => (answer += c.toString()));
  await once(socket, 'close');
  t.regex(answer, /^HTTP\/1\.1 200/);
  t.is(stub.requests[0].body.messages[0].content, text);
});
