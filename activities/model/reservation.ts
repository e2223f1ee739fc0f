import type { ModelRequest } from './types';

/** What a chat template adds around each message and each tool schema (role markers, separators), in tokens. */
const TEMPLATE_TOKENS_EACH = 16;

/**
 * The most a model call can cost, reserved against a budget before it is sent: the request's messages and tools as
 * UTF-8 JSON bytes (a byte-level tokenizer never makes a token of less than one byte, so this bounds the prompt
 * tokens, generously: text is 3–4 bytes a token), a template allowance per message and tool, and the answer's
 * `max_tokens`. Deterministic: the same request reserves the same on every attempt.
 */
export function reservationOf(request: Pick<ModelRequest, 'messages' | 'tools'>, maxOutputTokens: number): number {
  const bytes = requestJsonBytes(request);
  return bytes + TEMPLATE_TOKENS_EACH * (request.messages.length + request.tools.length) + maxOutputTokens;
}

/**
 * The UTF-8 bytes of `JSON.stringify({ messages, tools })`, summed from each message's and tool's own JSON (UTF-8
 * lengths add up over concatenation; the brackets, commas and keys are counted here). Each object's is measured once:
 * an earlier turn's messages are the same objects from one model call to the next (activities/store/turn-cache.ts),
 * and a profile's tools are one array, so a call measures only what is new — its request near the context budget
 * was hundreds of kilobytes serialized again every step only to be counted.
 */
export function requestJsonBytes(request: Pick<ModelRequest, 'messages' | 'tools'>): number {
  return `{"messages":`.length + arrayBytes(request.messages) + `,"tools":`.length + arrayBytes(request.tools) + 1;
}

/** The objects' JSON bytes, each measured once (they are not changed after they are built). */
const measured = new WeakMap<object, number>();

function arrayBytes(items: readonly object[]): number {
  let bytes = 2 + Math.max(0, items.length - 1);
  for (const item of items) {
    let size = measured.get(item);
    if (size === undefined) {
      size = Buffer.byteLength(JSON.stringify(item), 'utf8');
      measured.set(item, size);
    }
    bytes += size;
  }
  return bytes;
}
