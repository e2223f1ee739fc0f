import { randomBytes } from 'node:crypto';
import test from 'ava';
import { ApplicationFailure, DefaultPayloadConverter } from '@temporalio/common';
import { decodeOptionalFailureToOptionalError, encodeErrorToFailure, loadDataConverter } from '@temporalio/common/lib/internal-non-workflow';
import { AesGcmPayloadCodec, ENCRYPTED_ENCODING, KEY_ID_METADATA, PayloadDecryptionError, PayloadKeyError, payloadKeysFromEnv } from '../../client/codec';
import { dataConverterFromEnv } from '../../client/connection';

const converter = new DefaultPayloadConverter();
const keyA = randomBytes(32);
const keyB = randomBytes(32);

function codecFrom(env: NodeJS.ProcessEnv): AesGcmPayloadCodec {
  const keys = payloadKeysFromEnv(env);
  if (!keys) throw new Error('no keys');
  return new AesGcmPayloadCodec(keys);
}

const text = (bytes: Uint8Array | null | undefined) => Buffer.from(bytes ?? new Uint8Array()).toString('utf8');

test('round trip: the stored payload is ciphertext under the key id; decoding gives back the original payload', async (t) => {
  const codec = codecFrom({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' });
  const original = converter.toPayload({ task: 'add a SECRET-TASK-TEXT to the readme' });
  const [encoded] = await codec.encode([original]);
  t.is(text(encoded!.metadata!.encoding), ENCRYPTED_ENCODING);
  t.is(text(encoded!.metadata![KEY_ID_METADATA]), 'k1');
  t.false(Buffer.from(encoded!.data!).includes('SECRET-TASK-TEXT'));
  // A random IV per payload: the same payload twice is two different ciphertexts.
  const [again] = await codec.encode([original]);
  t.notDeepEqual(Buffer.from(again!.data!), Buffer.from(encoded!.data!));
  const [decoded] = await codec.decode([encoded!]);
  t.deepEqual(converter.fromPayload(decoded!), { task: 'add a SECRET-TASK-TEXT to the readme' });
  t.is(text(decoded!.metadata!.encoding), 'json/plain');
});

test('rotation: a payload under an old key id decodes while that key is listed in ORCHARD_PAYLOAD_KEYS_OLD', async (t) => {
  const before = codecFrom({ ORCHARD_PAYLOAD_KEY: keyA.toString('hex'), ORCHARD_PAYLOAD_KEY_ID: 'k1' });
  const [old] = await before.encode([converter.toPayload('old history')]);
  const after = codecFrom({
    ORCHARD_PAYLOAD_KEY: keyB.toString('base64'),
    ORCHARD_PAYLOAD_KEY_ID: 'k2',
    ORCHARD_PAYLOAD_KEYS_OLD: `k1:${keyA.toString('base64')}`,
  });
  t.is(converter.fromPayload((await after.decode([old!]))[0]!), 'old history');
  const [fresh] = await after.encode([converter.toPayload('new')]);
  t.is(text(fresh!.metadata![KEY_ID_METADATA]), 'k2');
  // Once k1 is dropped from the list, its payloads fail loudly, naming the key id.
  const dropped = codecFrom({ ORCHARD_PAYLOAD_KEY: keyB.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k2' });
  const err = await t.throwsAsync(dropped.decode([old!]), { instanceOf: PayloadDecryptionError });
  t.is(err.code, 'payload_decryption_failed');
  t.is(err.keyId, 'k1');
  t.regex(err.message, /key id "k1".*not configured/);
});

test('a wrong key under the same id, or an altered ciphertext, fails authentication loudly', async (t) => {
  const codec = codecFrom({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' });
  const [encoded] = await codec.encode([converter.toPayload('x'.repeat(100))]);
  const wrong = codecFrom({ ORCHARD_PAYLOAD_KEY: keyB.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' });
  const err = await t.throwsAsync(wrong.decode([encoded!]), { instanceOf: PayloadDecryptionError });
  t.regex(err.message, /key id "k1" failed authentication/);
  const tampered = Buffer.from(encoded!.data!);
  tampered[20] = tampered[20]! ^ 1;
  await t.throwsAsync(codec.decode([{ ...encoded!, data: new Uint8Array(tampered) }]), {
    instanceOf: PayloadDecryptionError,
    message: /failed authentication/,
  });
  await t.throwsAsync(codec.decode([{ ...encoded!, data: new Uint8Array(tampered.subarray(0, 10)) }]), {
    instanceOf: PayloadDecryptionError,
    message: /truncated/,
  });
  await t.throwsAsync(codec.decode([{ metadata: { encoding: encoded!.metadata!.encoding! }, data: encoded!.data! }]), { instanceOf: PayloadDecryptionError });
});

test('payloads that are not encrypted pass through decode unchanged (histories from before encryption stay readable)', async (t) => {
  const codec = codecFrom({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64') });
  const plain = [converter.toPayload({ a: 1 }), converter.toPayload(undefined), { data: new Uint8Array([1, 2]) }];
  t.deepEqual(await codec.decode(plain), plain);
});

test('key configuration: unset is no encryption; bad material is a typed PayloadKeyError that never echoes the key', (t) => {
  t.is(payloadKeysFromEnv({}), undefined);
  t.is(dataConverterFromEnv({}), undefined);
  t.is(dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: '' }), undefined);
  const converterOn = dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64') });
  t.true(converterOn?.payloadCodecs?.[0] instanceof AesGcmPayloadCodec);
  t.is(payloadKeysFromEnv({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64') })?.current.id, 'default');
  const bad: NodeJS.ProcessEnv[] = [
    { ORCHARD_PAYLOAD_KEY: 'c2hvcnQ=' }, // 5 bytes
    { ORCHARD_PAYLOAD_KEY: 'not base64 at all!' },
    { ORCHARD_PAYLOAD_KEY: randomBytes(16).toString('hex') },
    { ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'has space' },
    { ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEYS_OLD: 'k0' },
    { ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEYS_OLD: 'k0:short' },
    { ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1', ORCHARD_PAYLOAD_KEYS_OLD: `k1:${keyB.toString('base64')}` },
    { ORCHARD_PAYLOAD_KEYS_OLD: `k1:${keyB.toString('base64')}` },
  ];
  for (const env of bad) {
    const err = t.throws(() => dataConverterFromEnv(env), { instanceOf: PayloadKeyError }, JSON.stringify(env));
    t.is(err.code, 'payload_key_invalid');
    for (const value of Object.values(env)) if (value && value.length > 20) t.false(err.message.includes(value));
  }
});

test('with a key, a failure is stored as `Encoded failure` and ciphertext; its code stays readable; the key reads the message back', async (t) => {
  const on = loadDataConverter(dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' }));
  const refusal = ApplicationFailure.create({ type: 'repository_not_found', message: '/srv/SECRET-REPO is not a directory', nonRetryable: true });
  const failure = await encodeErrorToFailure(on, refusal);
  t.is(failure.message, 'Encoded failure');
  t.is(failure.stackTrace, '');
  t.is(failure.applicationFailureInfo?.type, 'repository_not_found');
  t.true(failure.applicationFailureInfo?.nonRetryable);
  t.is(text(failure.encodedAttributes?.metadata?.encoding), ENCRYPTED_ENCODING);
  const stored = Buffer.from(JSON.stringify(failure));
  t.false(stored.includes('SECRET-REPO'));
  t.false(stored.includes('payload-codec.test'), 'nor the stack trace');
  const back = await decodeOptionalFailureToOptionalError(on, failure);
  t.true(back instanceof ApplicationFailure);
  t.is((back as ApplicationFailure).type, 'repository_not_found');
  t.is(back?.message, '/srv/SECRET-REPO is not a directory');
  t.regex(back?.stack ?? '', /payload-codec\.test/);
  // The SDK's default converter (a client without Orchard's failure converter, but with the key) reads it as well.
  const codecOnly = loadDataConverter({ payloadCodecs: on.payloadCodecs });
  t.is((await decodeOptionalFailureToOptionalError(codecOnly, failure))?.message, '/srv/SECRET-REPO is not a directory');
  // Without a key, failures are what they always were.
  const off = loadDataConverter(dataConverterFromEnv({}));
  t.is((await encodeErrorToFailure(off, refusal)).message, '/srv/SECRET-REPO is not a directory');
});

test("a worker's own decryption failure stays readable: encrypted, it would be under the key that does not match", async (t) => {
  const on = loadDataConverter(dataConverterFromEnv({ ORCHARD_PAYLOAD_KEY: keyA.toString('base64'), ORCHARD_PAYLOAD_KEY_ID: 'k1' }));
  const err = new PayloadDecryptionError('payload under key id "k1" failed authentication', 'k1', {
    cause: new Error('Unsupported state or unable to authenticate data'),
  });
  const failure = await encodeErrorToFailure(on, err);
  t.is(failure.message, 'payload under key id "k1" failed authentication');
  t.falsy(failure.encodedAttributes);
  t.is(failure.cause?.message, 'Unsupported state or unable to authenticate data');
  t.falsy(failure.cause?.encodedAttributes);
});
