import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure, type Payload } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { OrchardClient, OrchardError } from '../../client/client';
import { ENCRYPTED_ENCODING, KEY_ID_METADATA } from '../../client/codec';
import { dataConverterFromEnv } from '../../client/connection';
import { startCodecServer } from '../../cli/codec-server';
import { sessionWorkflowId } from '../../contract/messages';
import { makeRepo, startOrchard, testStackEnv, uniqueId, writeScenario } from '../helpers/orchard';

const key = randomBytes(32).toString('base64');
const env = { ORCHARD_PAYLOAD_KEY: key, ORCHARD_PAYLOAD_KEY_ID: 'k1' };

const text = (bytes: Uint8Array | null | undefined) => Buffer.from(bytes ?? new Uint8Array()).toString('utf8');
const b64 = (bytes: Uint8Array | null | undefined) => Buffer.from(bytes ?? new Uint8Array()).toString('base64');

/** A client on the run's server with this data converter (none: the raw, stored payloads). */
async function clientWith(t: import('ava').ExecutionContext, taskQueue: string, dataConverter = dataConverterFromEnv({})) {
  const connection = await Connection.connect({ address: testStackEnv().temporalAddress });
  t.teardown(() => connection.close());
  return new OrchardClient(new Client({ connection, namespace: testStackEnv().namespace, dataConverter }), { taskQueue });
}

test('with ORCHARD_PAYLOAD_KEY the history holds only ciphertext; the session works; the codec server decodes; a wrong key fails loudly', async (t) => {
  const orchard = await startOrchard(t, { dataConverter: dataConverterFromEnv(env) });
  const sessionId = uniqueId('enc');
  const title = `title-${randomBytes(6).toString('hex')}`;
  const task = `TASK-TEXT-${randomBytes(6).toString('hex')} add a line to the readme`;
  const scenario = writeScenario({ name: 'enc', turns: [{ repeat: true, steps: [{ content: 'done' }] }] });
  await orchard.client.createSession({ sessionId, title, repo: makeRepo(), model: { provider: 'scripted', scenario }, task });
  const view = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(view.tasks?.done, 1);
  t.is((await orchard.client.status(sessionId)).sessionId, sessionId);

  // What the server stored, read without any codec.
  const raw = await clientWith(t, orchard.taskQueue);
  const history = await raw.temporal.workflowService.getWorkflowExecutionHistory({
    namespace: testStackEnv().namespace,
    execution: { workflowId: sessionWorkflowId(sessionId) },
  });
  const bytes = Buffer.from(temporal.api.workflowservice.v1.GetWorkflowExecutionHistoryResponse.encode(history).finish());
  t.false(bytes.includes(task), 'the task text is not in the stored history');
  t.false(bytes.includes(title), 'the title is not in the stored history');
  const started = history.history?.events?.[0]?.workflowExecutionStartedEventAttributes;
  const input = started?.input?.payloads?.[0] as Payload | undefined;
  t.truthy(input);
  t.is(text(input?.metadata?.encoding), ENCRYPTED_ENCODING);
  t.is(text(input?.metadata?.[KEY_ID_METADATA]), 'k1');
  // Every payload of the history is encrypted, not only the input — except the patch markers' `patch-data`, which the
  // SDK's core writes itself (a patch id such as {"id":"session-v2"}, never data), outside the data converter.
  const plain: string[] = [];
  let encrypted = 0;
  const collect = (value: unknown, path: string): void => {
    if (!value || typeof value !== 'object' || value instanceof Uint8Array) return;
    const payloads = (value as { payloads?: Payload[] }).payloads;
    if (Array.isArray(payloads) && !path.endsWith('markerRecordedEventAttributes.details.patch-data')) {
      for (const p of payloads) {
        if (text(p.metadata?.encoding) === ENCRYPTED_ENCODING) encrypted++;
        else plain.push(`${path}: ${text(p.data)}`);
      }
    }
    for (const [k, child] of Object.entries(value)) collect(child, `${path}.${k}`);
  };
  collect(history.history, 'history');
  t.deepEqual(plain, []);
  t.true(encrypted >= 3, `${encrypted} encrypted payload lists`);

  // A client without the key sees ciphertext it cannot read: the status query fails, naming the key id.
  const keyless = await clientWith(t, orchard.taskQueue);
  await t.throwsAsync(keyless.status(sessionId));
  const wrongKey = await clientWith(
    t,
    orchard.taskQueue,
    dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: randomBytes(32).toString('hex'), ORCHARD_PAYLOAD_KEY_ID: 'k1' }),
  );
  const wrong = await t.throwsAsync(wrongKey.status(sessionId), { instanceOf: OrchardError });
  t.is(wrong.code, 'payload_decryption_failed');
  t.regex(wrong.message, /key id "k1" failed authentication/);
  const otherId = await clientWith(
    t,
    orchard.taskQueue,
    dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: randomBytes(32).toString('hex'), ORCHARD_PAYLOAD_KEY_ID: 'k2' }),
  );
  const unknown = await t.throwsAsync(otherId.status(sessionId), { instanceOf: OrchardError });
  t.is(unknown.code, 'payload_decryption_failed');
  t.regex(unknown.message, /key id "k1", which is not configured here/);

  // The codec server with the same key decodes a stored payload to the plaintext the workflow was started with.
  const codec = dataConverterFromEnv(env)!.payloadCodecs![0]!;
  const { server, url } = await startCodecServer({ codec, port: 0 });
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const body = JSON.stringify({
    payloads: [{ metadata: { encoding: b64(input!.metadata!.encoding), [KEY_ID_METADATA]: b64(input!.metadata![KEY_ID_METADATA]) }, data: b64(input!.data) }],
  });
  const origin = 'http://localhost:8233';
  const decoded = await fetch(`${url}/decode`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Origin: origin, 'X-Namespace': 'default' },
    body,
  });
  t.is(decoded.status, 200);
  t.is(decoded.headers.get('access-control-allow-origin'), origin);
  const { payloads } = (await decoded.json()) as { payloads: { metadata: Record<string, string>; data: string }[] };
  t.is(Buffer.from(payloads[0]!.metadata.encoding!, 'base64').toString(), 'json/plain');
  t.true(Buffer.from(payloads[0]!.data, 'base64').toString().includes(title));
  // And back: /encode gives a payload the codec decodes again.
  const encoded = await fetch(`${url}/encode`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ payloads }) });
  const again = ((await encoded.json()) as { payloads: { metadata: Record<string, string> }[] }).payloads[0]!;
  t.is(Buffer.from(again.metadata.encoding!, 'base64').toString(), ENCRYPTED_ENCODING);

  // The Web UI's preflight is answered for its origins only.
  const preflight = await fetch(`${url}/decode`, {
    method: 'OPTIONS',
    headers: { Origin: 'http://127.0.0.1:8233', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' },
  });
  t.is(preflight.status, 204);
  t.is(preflight.headers.get('access-control-allow-origin'), 'http://127.0.0.1:8233');
  t.regex(preflight.headers.get('access-control-allow-headers') ?? '', /X-Namespace/);
  const foreign = await fetch(`${url}/decode`, { method: 'OPTIONS', headers: { Origin: 'http://evil.example' } });
  t.is(foreign.headers.get('access-control-allow-origin'), null);

  // A codec server with another key refuses loudly: an error naming the key id, never the ciphertext.
  const other = await startCodecServer({
    codec: dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: randomBytes(32).toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k2' })!.payloadCodecs![0]!,
    port: 0,
  });
  t.teardown(() => new Promise<void>((resolve) => other.server.close(() => resolve())));
  const refused = await fetch(`${other.url}/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
  t.is(refused.status, 400);
  t.like(await refused.json(), { code: 'payload_decryption_failed' });
});

/** The raw, stored history of a workflow (read without any codec) and its protobuf bytes. */
async function rawHistory(raw: OrchardClient, workflowId: string) {
  const history = await raw.temporal.workflowService.getWorkflowExecutionHistory({ namespace: testStackEnv().namespace, execution: { workflowId } });
  const bytes = Buffer.from(temporal.api.workflowservice.v1.GetWorkflowExecutionHistoryResponse.encode(history).finish());
  return { events: history.history?.events ?? [], bytes };
}

test('with ORCHARD_PAYLOAD_KEY failure messages and stack traces are ciphertext in history; the client still gets the code and the message', async (t) => {
  const orchard = await startOrchard(t, { dataConverter: dataConverterFromEnv(env) });
  const raw = await clientWith(t, orchard.taskQueue);
  const scenario = writeScenario({ name: 'enc', turns: [{ repeat: true, steps: [{ content: 'done' }] }] });
  const model = { provider: 'scripted' as const, scenario };

  // A repository that does not exist, named by a marker: the activity fails (the worker's failure converter), then
  // the workflow with the same refusal (the workflow bundle's).
  const marker = `MISSING-REPO-${randomBytes(6).toString('hex')}`;
  const missing = uniqueId('enc-norepo');
  await orchard.client.createSession({ sessionId: missing, title: 'no repo', repo: join(tmpdir(), marker), model });
  const closed = await orchard.client.waitUntilSettled(missing);
  t.is(closed.error?.code, 'repository_not_found');
  t.true(closed.error?.message.includes(marker), closed.error?.message);
  // The status says closed before the run has ended: its end is awaited, so that the history holds the failure.
  const ended = await t.throwsAsync(orchard.temporal.workflow.getHandle(sessionWorkflowId(missing)).result(), { instanceOf: WorkflowFailedError });
  t.true(ended.cause instanceof ApplicationFailure);
  t.is((ended.cause as ApplicationFailure).type, 'repository_not_found');
  t.true(ended.cause?.message.includes(marker), ended.cause?.message);
  const norepo = await rawHistory(raw, sessionWorkflowId(missing));
  t.false(norepo.bytes.includes(marker), 'the failure messages are not in the stored history');
  const workflowFailure = norepo.events.find((e) => e.workflowExecutionFailedEventAttributes)?.workflowExecutionFailedEventAttributes?.failure;
  t.is(workflowFailure?.message, 'Encoded failure');
  t.is(workflowFailure?.applicationFailureInfo?.type, 'repository_not_found');
  t.is(text(workflowFailure?.encodedAttributes?.metadata?.encoding), ENCRYPTED_ENCODING);
  const activityFailures = norepo.events.map((e) => e.activityTaskFailedEventAttributes?.failure).filter((f) => !!f);
  t.true(activityFailures.length > 0, 'an activity failed');
  for (const failure of activityFailures) {
    t.is(failure.message, 'Encoded failure');
    t.falsy(failure.stackTrace);
    t.is(text(failure.encodedAttributes?.metadata?.encoding), ENCRYPTED_ENCODING);
  }
  // The code stays readable: the type of the failure, which the client maps to an Orchard error code.
  t.true(activityFailures.some((f) => f.applicationFailureInfo?.type === 'repository_not_found'));

  // An update's refusal in its handler (the workflow bundle's failure converter) is in history: resolveHold on a
  // session with nothing held names the session's worktree, a path that appears nowhere else in plaintext.
  const sessionId = uniqueId('enc-refused');
  await orchard.client.createSession({ sessionId, title: 'refusals', repo: makeRepo(), model, task: 'a task' });
  const idle = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  const worktree = idle.worktree!;
  t.truthy(worktree);
  const refused = await t.throwsAsync(orchard.client.resolveHold(sessionId), { instanceOf: OrchardError });
  t.is(refused.code, 'invalid_input');
  t.true(refused.message.includes(`no open verification hold on ${worktree}`), refused.message);
  // A validator's refusal is never written to history, and travels encrypted as well: code and message arrive.
  const invalid = await t.throwsAsync(orchard.client.resolveHold(sessionId, { by: 'x'.repeat(2001) }), { instanceOf: OrchardError });
  t.is(invalid.code, 'invalid_input');
  t.is(invalid.message, 'resolveHold: by must be a string of at most 2000 characters');
  const session = await rawHistory(raw, sessionWorkflowId(sessionId));
  t.false(session.bytes.includes(worktree), 'the refusal message is not in the stored history');
  const updateFailures = session.events.map((e) => e.workflowExecutionUpdateCompletedEventAttributes?.outcome?.failure).filter((f) => !!f);
  t.is(updateFailures.length, 1);
  t.is(updateFailures[0]!.message, 'Encoded failure');
  t.is(updateFailures[0]!.applicationFailureInfo?.type, 'invalid_input');
  t.is(text(updateFailures[0]!.encodedAttributes?.metadata?.encoding), ENCRYPTED_ENCODING);

  // Activity summaries (user metadata, what the Web UI shows per activity) go through the codec too.
  const summaries = [...norepo.events, ...session.events].map((e) => e.userMetadata?.summary).filter((p) => !!p);
  t.true(summaries.length > 0);
  for (const summary of summaries) t.is(text(summary.metadata?.encoding), ENCRYPTED_ENCODING);
});

test('a worker with the wrong key does no work: its workflow task fails, naming the key id, and nothing is decoded as garbage', async (t) => {
  // The worker has another key under the same id as the client's.
  const orchard = await startOrchard(t, {
    dataConverter: dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: randomBytes(32).toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' }),
  });
  const client = await clientWith(t, orchard.taskQueue, dataConverterFromEnv(env));
  const sessionId = uniqueId('enc-wrong');
  const scenario = writeScenario({ name: 'enc', turns: [{ repeat: true, steps: [{ content: 'done' }] }] });
  // The create waits for an update the worker can never read: it is left pending, and the run terminated at the end.
  const creating = client.createSession({ sessionId, title: 'wrong key', repo: makeRepo(), model: { provider: 'scripted', scenario }, task: 'never read' });
  creating.catch(() => undefined);
  const handle = client.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
  t.teardown(() => handle.terminate('test over').catch(() => undefined));
  const deadline = Date.now() + 60_000;
  let failure: temporal.api.failure.v1.IFailure | undefined;
  while (!failure && Date.now() < deadline) {
    const history = await client.temporal.workflowService
      .getWorkflowExecutionHistory({ namespace: testStackEnv().namespace, execution: { workflowId: sessionWorkflowId(sessionId) } })
      .catch(() => undefined);
    const failed = history?.history?.events?.find((e) => e.workflowTaskFailedEventAttributes);
    failure = failed?.workflowTaskFailedEventAttributes?.failure ?? undefined;
    if (!failure) await new Promise((r) => setTimeout(r, 200));
  }
  t.truthy(failure, 'a workflow task failure is recorded');
  // In plaintext although failures are encrypted: under this worker's key, nobody with the right one could read it.
  t.regex(failure?.message ?? '', /key id "k1" failed authentication/);
  t.is(failure?.cause?.message, 'Unsupported state or unable to authenticate data');
  const description = await handle.describe();
  t.is(description.status.name, 'RUNNING');
});
