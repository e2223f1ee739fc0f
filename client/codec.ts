import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

/**
 * Optional payload encryption: AES-256-GCM over the whole serialized Payload (`temporal.api.common.v1.Payload`), a
 * random 12-byte IV per payload. The stored payload is `IV ‖ ciphertext ‖ 16-byte tag`, with the metadata
 * `encoding: binary/encrypted` and `encryption-key-id: <id>`, so a reader picks the key by id and keys can rotate:
 * new payloads are encrypted with the current key, old ones decrypt with any key still listed.
 */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';

const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
const DEFAULT_KEY_ID = 'default';

/** Key material in ORCHARD_PAYLOAD_KEY* is missing, malformed or not 32 bytes: refused at start. */
export class PayloadKeyError extends Error {
  readonly code = 'payload_key_invalid';
  constructor(message: string) {
    super(message);
    this.name = 'PayloadKeyError';
  }
}

/** An encrypted payload cannot be decrypted: its key id is not configured here, or it fails authentication. */
export class PayloadDecryptionError extends Error {
  readonly code = 'payload_decryption_failed';
  constructor(
    message: string,
    readonly keyId: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'PayloadDecryptionError';
  }
}

export interface PayloadKeys {
  /** The key new payloads are encrypted with. */
  readonly current: { readonly id: string; readonly key: Buffer };
  /** Keys that only decrypt (during a rotation), by id. */
  readonly old: ReadonlyMap<string, Buffer>;
}

export class AesGcmPayloadCodec implements PayloadCodec {
  private readonly keys: ReadonlyMap<string, Buffer>;

  constructor(private readonly config: PayloadKeys) {
    this.keys = new Map([...config.old, [config.current.id, config.current.key]]);
  }

  // async: a failure is a rejected promise, as the SDK expects of a codec, never a synchronous throw.
  async encode(payloads: Payload[]): Promise<Payload[]> {
    const { id, key } = this.config.current;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const data = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return { metadata: { encoding: utf8(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: utf8(id) }, data: new Uint8Array(data) };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => this.decodeOne(payload));
  }

  private decodeOne(payload: Payload): Payload {
    const encoding = payload.metadata?.encoding;
    // Not encrypted (written before encryption was turned on): passed through, so old histories stay readable.
    if (!encoding || Buffer.from(encoding).toString('utf8') !== ENCRYPTED_ENCODING) return payload;
    const rawId = payload.metadata?.[KEY_ID_METADATA];
    const keyId = rawId ? Buffer.from(rawId).toString('utf8') : undefined;
    if (keyId === undefined) throw new PayloadDecryptionError(`encrypted payload without an ${KEY_ID_METADATA}: cannot choose a key`, undefined);
    const key = this.keys.get(keyId);
    if (!key) {
      throw new PayloadDecryptionError(
        `payload encrypted with key id "${keyId}", which is not configured here (known: ${[...this.keys.keys()].join(', ')}); ` +
          'set it as ORCHARD_PAYLOAD_KEY or list it in ORCHARD_PAYLOAD_KEYS_OLD',
        keyId,
      );
    }
    const data = Buffer.from(payload.data ?? new Uint8Array());
    if (data.length < IV_BYTES + TAG_BYTES) throw new PayloadDecryptionError(`encrypted payload (key id "${keyId}") is truncated`, keyId);
    let plain: Buffer;
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch (err) {
      throw new PayloadDecryptionError(
        `payload under key id "${keyId}" failed authentication: the key configured under that id is not the one it was encrypted with, or the payload was altered`,
        keyId,
        { cause: err },
      );
    }
    return temporal.api.common.v1.Payload.decode(plain);
  }
}

/**
 * The keys from the environment, or undefined when ORCHARD_PAYLOAD_KEY is unset (no encryption).
 * - ORCHARD_PAYLOAD_KEY: the current key, 32 bytes as base64 or as 64 hex digits.
 * - ORCHARD_PAYLOAD_KEY_ID: its id (letters, digits, `.`, `_`, `-`; default `default`), stored with every payload.
 * - ORCHARD_PAYLOAD_KEYS_OLD: keys that still decrypt, `<id>:<key>,<id>:<key>`.
 */
export function payloadKeysFromEnv(env: NodeJS.ProcessEnv = process.env): PayloadKeys | undefined {
  const current = env.ORCHARD_PAYLOAD_KEY;
  const old = env.ORCHARD_PAYLOAD_KEYS_OLD;
  if (!current) {
    if (old || env.ORCHARD_PAYLOAD_KEY_ID) throw new PayloadKeyError('ORCHARD_PAYLOAD_KEY_ID or ORCHARD_PAYLOAD_KEYS_OLD is set without ORCHARD_PAYLOAD_KEY');
    return undefined;
  }
  const id = keyIdOf(env.ORCHARD_PAYLOAD_KEY_ID || DEFAULT_KEY_ID, 'ORCHARD_PAYLOAD_KEY_ID');
  const keys = { current: { id, key: keyOf(current, 'ORCHARD_PAYLOAD_KEY') }, old: new Map<string, Buffer>() };
  for (const entry of (old ?? '').split(',').map((e) => e.trim())) {
    if (!entry) continue;
    const colon = entry.indexOf(':');
    if (colon < 0) throw new PayloadKeyError('ORCHARD_PAYLOAD_KEYS_OLD: each entry is <id>:<key> (base64 or hex of 32 bytes)');
    const oldId = keyIdOf(entry.slice(0, colon), 'ORCHARD_PAYLOAD_KEYS_OLD');
    if (oldId === id || keys.old.has(oldId)) throw new PayloadKeyError(`ORCHARD_PAYLOAD_KEYS_OLD: key id "${oldId}" is given twice`);
    keys.old.set(oldId, keyOf(entry.slice(colon + 1), `ORCHARD_PAYLOAD_KEYS_OLD (key id "${oldId}")`));
  }
  return keys;
}

function keyIdOf(value: string, variable: string): string {
  if (!KEY_ID.test(value)) throw new PayloadKeyError(`${variable}: key id "${value}" must be 1-64 letters, digits, '.', '_' or '-'`);
  return value;
}

function keyOf(value: string, variable: string): Buffer {
  const text = value.trim();
  let key: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(text)) key = Buffer.from(text, 'hex');
  else if (/^[A-Za-z0-9+/]+={0,2}$/.test(text) && text.length % 4 === 0) key = Buffer.from(text, 'base64');
  // Never the value itself: it is a secret.
  if (!key || key.length !== KEY_BYTES) {
    throw new PayloadKeyError(`${variable}: not a 32-byte key (give 44 base64 characters, e.g. from \`openssl rand -base64 32\`, or 64 hex digits)`);
  }
  return key;
}

function utf8(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, 'utf8'));
}
