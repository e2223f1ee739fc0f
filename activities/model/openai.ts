import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError } from 'openai';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { z } from 'zod';
import { describeIssues, ModelError, type AssistantMessage, type ModelProvider, type ModelRequest, type ModelResponse, type ToolCall } from './types';

export interface OpenAIProviderConfig {
  /** API root including any `/v1`; requests go to `<baseURL>/chat/completions`. */
  baseURL: string;
  /** Sent when a request names no model. */
  model: string;
  /** Sent as `Authorization: Bearer …`; absent for local endpoints that want none. */
  apiKey?: string;
  /** Deadline for the whole call, response body included. Keep it below the activity's startToCloseTimeout. */
  timeoutMs: number;
}

/** Local models can take minutes on a long transcript; a hung endpoint should still fail well inside an activity. */
const DEFAULT_MODEL_TIMEOUT_MS = 120_000;

/** Error text from the endpoint is kept this short: it ends up in workflow history. */
const MAX_ERROR_TEXT = 500;

/**
 * The OpenAI-compatible endpoint, or undefined when `ORCHARD_MODEL_URL` is unset (the worker then uses the
 * scripted provider). Throws on a half-configured environment rather than guessing a model name.
 */
export function openAIConfigFromEnv(env: NodeJS.ProcessEnv = process.env): OpenAIProviderConfig | undefined {
  const baseURL = env.ORCHARD_MODEL_URL?.trim();
  if (!baseURL) return undefined;
  try {
    new URL(baseURL);
  } catch {
    throw new Error(`ORCHARD_MODEL_URL is not a URL: ${JSON.stringify(baseURL)}`);
  }
  const model = env.ORCHARD_MODEL?.trim();
  if (!model) throw new Error('ORCHARD_MODEL must name the model when ORCHARD_MODEL_URL is set');
  const rawTimeout = env.ORCHARD_MODEL_TIMEOUT_MS?.trim();
  const timeoutMs = rawTimeout ? Number(rawTimeout) : DEFAULT_MODEL_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    throw new Error(`ORCHARD_MODEL_TIMEOUT_MS must be a positive whole number of milliseconds, got ${rawTimeout}`);
  }
  const apiKey = env.ORCHARD_MODEL_API_KEY?.trim() || undefined;
  return { baseURL, model, apiKey, timeoutMs };
}

/** Fields the SDK types promise but a compatible server may omit or get wrong: checked, never assumed. */
const tokenCount = z.number().int().nonnegative().optional().catch(undefined);

const wireToolCall = z.object({
  // Some compatible servers omit the id; one is derived from the position so the transcript stays linkable.
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

const wireCompletion = z.object({
  model: z.string().optional(),
  choices: z
    .array(
      z.object({
        finish_reason: z.string().nullish(),
        message: z.object({
          content: z.string().nullish(),
          tool_calls: z.array(wireToolCall).nullish(),
        }),
      }),
    )
    .min(1),
  // Usage is bookkeeping: a server that reports it oddly still gave a usable answer.
  usage: z.object({ prompt_tokens: tokenCount, completion_tokens: tokenCount, total_tokens: tokenCount }).nullish().catch(undefined),
});

/** Turns a Chat Completions response body into a ModelResponse, or says precisely what is wrong with it. */
function parseChatCompletion(body: string, requestedModel: string): ModelResponse {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    throw malformed(`the body is not JSON: ${JSON.stringify(excerpt(body, 200))}`);
  }
  const parsed = wireCompletion.safeParse(json);
  if (!parsed.success) {
    const serverError = (json as { error?: { message?: unknown } } | null)?.error?.message;
    const said = typeof serverError === 'string' ? ` (the server said: ${excerpt(serverError, 200)})` : '';
    throw malformed(`${describeIssues(parsed.error.issues)}${said}`);
  }
  const { choices, usage, model } = parsed.data;
  const choice = choices[0];
  const toolCalls: ToolCall[] = (choice.message.tool_calls ?? []).map((call, i) => ({
    id: call.id || `call_${i}`,
    type: 'function',
    function: { name: call.function.name, arguments: call.function.arguments },
  }));
  const message: AssistantMessage = {
    role: 'assistant',
    content: choice.message.content ?? null,
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
  };
  return {
    message,
    finishReason: choice.finish_reason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop'),
    usage: usageOf(usage),
    model: model ?? requestedModel,
  };
}

/**
 * The usage a server reported, or undefined when it reported none: a total, or both parts. A missing count is never
 * read as 0 (the call would then cost nothing against a budget): the caller charges the call's reservation instead.
 */
function usageOf(usage: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number } | null | undefined): ModelResponse['usage'] {
  const prompt = usage?.prompt_tokens;
  const completion = usage?.completion_tokens;
  const total = usage?.total_tokens ?? (prompt !== undefined && completion !== undefined ? prompt + completion : undefined);
  if (total === undefined) return undefined;
  return { promptTokens: prompt ?? 0, completionTokens: completion ?? 0, totalTokens: total };
}

function malformed(what: string): ModelError {
  return new ModelError('model_response_malformed', `the model endpoint's chat completion is malformed: ${what}`, false);
}

/**
 * Any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, llama.cpp, Ollama, LiteLLM, …).
 * One HTTP attempt per call: retries belong to the activity retry policy, which sees `retryable`.
 */
export class OpenAICompatibleProvider implements ModelProvider {
  readonly name = 'openai';
  private readonly client: OpenAI;

  constructor(private readonly config: OpenAIProviderConfig) {
    this.client = new OpenAI({
      baseURL: config.baseURL,
      // The SDK refuses to start without a key; a keyless endpoint gets a placeholder whose header is removed below.
      apiKey: config.apiKey ?? 'no-key',
      defaultHeaders: config.apiKey ? undefined : { Authorization: null },
      // Passed explicitly so the SDK never picks up OPENAI_* variables meant for something else.
      organization: null,
      project: null,
      maxRetries: 0,
      timeout: config.timeoutMs,
    });
  }

  get description(): string {
    let where = this.config.baseURL;
    try {
      const url = new URL(where);
      url.username = '';
      url.password = '';
      where = url.toString();
    } catch {
      // not a URL: shown as given
    }
    return `${this.config.model} at ${where} (OpenAI-compatible${this.config.apiKey ? ', with an API key' : ''})`;
  }

  async complete(request: ModelRequest, signal?: AbortSignal): Promise<ModelResponse> {
    if (signal?.aborted) throw signal.reason;
    const model = request.model ?? this.config.model;
    const body: ChatCompletionCreateParamsNonStreaming = {
      model,
      messages: request.messages,
      ...(request.maxTokens !== undefined ? { max_tokens: request.maxTokens } : {}),
      ...(request.tools.length > 0
        ? {
            tools: request.tools.map((tool) => ({
              type: 'function' as const,
              function: { name: tool.name, description: tool.description, parameters: { ...tool.parameters } },
            })),
          }
        : {}),
    };

    // The SDK's own timeout stops at the response headers; this deadline also covers a body that stalls.
    const deadline = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      deadline.abort();
    }, this.config.timeoutMs);
    const forwardAbort = () => deadline.abort();
    signal?.addEventListener('abort', forwardAbort, { once: true });
    let text: string;
    try {
      const response = await this.client.chat.completions.create(body, { signal: deadline.signal }).asResponse();
      text = await response.text();
    } catch (err) {
      // The caller's cancellation (a Temporal CancelledFailure) must surface as itself, not as a model failure.
      if (signal?.aborted) throw signal.reason;
      if (timedOut) throw this.timeoutError();
      throw this.toModelError(err);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', forwardAbort);
    }
    return parseChatCompletion(text, model);
  }

  private timeoutError(): ModelError {
    return new ModelError('model_timeout', `the model endpoint ${this.config.baseURL} did not answer within ${this.config.timeoutMs} ms`, true);
  }

  private toModelError(err: unknown): ModelError {
    if (err instanceof APIConnectionTimeoutError) return this.timeoutError();
    if (err instanceof APIConnectionError) {
      return new ModelError('model_unavailable', `cannot reach the model endpoint ${this.config.baseURL}: ${this.redact(causeChain(err))}`, true);
    }
    if (err instanceof APIError && typeof err.status === 'number') {
      const status = err.status;
      const said = this.redact(excerpt(err.message, MAX_ERROR_TEXT));
      const what = `the model endpoint ${this.config.baseURL} answered HTTP ${status}: ${said}`;
      if (status === 429) return new ModelError('model_rate_limited', what, true, status);
      if (status === 408) return new ModelError('model_timeout', what, true, status);
      if (status === 401 || status === 403) {
        return new ModelError('model_auth_failed', `${what} (check ORCHARD_MODEL_API_KEY)`, false, status);
      }
      if (status >= 400 && status < 500) return new ModelError('model_request_rejected', what, false, status);
      return new ModelError('model_unavailable', what, true, status);
    }
    // A connection dropped while the body was being read, or similar: transient as far as we can tell.
    return new ModelError('model_unavailable', `the call to the model endpoint ${this.config.baseURL} failed: ${this.redact(causeChain(err))}`, true);
  }

  /** Error text can echo request headers back; the key must never reach logs or workflow history. */
  private redact(text: string): string {
    const key = this.config.apiKey;
    return key ? text.split(key).join('[redacted]') : text;
  }
}

/** `fetch failed` alone says nothing; the causes say `ECONNREFUSED 127.0.0.1:1234`. */
function causeChain(err: unknown): string {
  const parts: string[] = [];
  let current: unknown = err;
  for (let depth = 0; depth < 4 && current !== undefined && current !== null; depth++) {
    const text = (current instanceof Error ? current.message : String(current)).replace(/\.$/, '');
    if (text && !parts.includes(text)) parts.push(text);
    current = current instanceof Error ? current.cause : undefined;
  }
  return excerpt(parts.join(': ') || 'unknown error', MAX_ERROR_TEXT);
}

function excerpt(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}…`;
}
