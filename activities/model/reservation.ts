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
  const bytes = Buffer.byteLength(JSON.stringify({ messages: request.messages, tools: request.tools }), 'utf8');
  return bytes + TEMPLATE_TOKENS_EACH * (request.messages.length + request.tools.length) + maxOutputTokens;
}
