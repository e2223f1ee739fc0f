import type { ToolDefinition } from '../../contract/tools';

/** OpenAI Chat Completions shapes: the transcript is stored in this form and sent as it is. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }
  | { role: 'tool'; content: string; tool_call_id: string };

export type AssistantMessage = Extract<ChatMessage, { role: 'assistant' }>;

interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

export interface ModelRequest {
  /** Model name for providers that serve several; the provider's default when absent. */
  model?: string;
  messages: ChatMessage[];
  tools: readonly ToolDefinition[];
  /**
   * How many messages after the system message are the conversation the session started from (a handoff, or its
   * parent's conversation), not its own turns. Not sent to a provider: the scripted one counts turns without them.
   */
  startingMessages?: number;
  /** Tokens the answer may have at most (`max_tokens`): set for budgeted callers, whose reservation counts it. */
  maxTokens?: number;
}

export interface ModelResponse {
  message: AssistantMessage;
  /** `stop`, `tool_calls`, `length`, … as the provider reported it. */
  finishReason: string;
  /** As the provider reported it; absent when it reported none (the call is then charged its reservation). */
  usage?: TokenUsage;
  /** The model that answered, as reported by the provider. */
  model: string;
}

export interface ModelProvider {
  /** `openai` or `scripted`: recorded with every call's usage. */
  readonly name: string;
  /** What answers, for people (worker start, `status`): the model and where, or the scenario; never a key. */
  readonly description?: string;
  complete(request: ModelRequest, signal?: AbortSignal): Promise<ModelResponse>;
}

export type ModelErrorCode =
  | 'model_rate_limited'
  | 'model_unavailable'
  | 'model_timeout'
  | 'model_auth_failed'
  | 'model_request_rejected'
  | 'model_response_malformed'
  | 'scenario_invalid'
  | 'scenario_exhausted'
  | 'scenario_expectation_failed';

/**
 * A provider failure. `retryable` ones (429, 5xx, timeouts, connection errors) are rethrown as plain
 * errors so the activity retry policy retries them; the rest become non-retryable typed failures.
 */
export class ModelError extends Error {
  constructor(
    readonly code: ModelErrorCode,
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'ModelError';
  }
}

/**
 * Says where a schema check failed, e.g. `turns[0].steps[1].tool_calls[0].name: expected string`, so a
 * ModelError names the bad field instead of dumping the validator's output.
 */
export function describeIssues(issues: readonly { path: readonly PropertyKey[]; message: string }[]): string {
  return issues
    .slice(0, 5)
    .map((issue) => `${issuePath(issue.path) || '(root)'}: ${issue.message}`)
    .join('; ');
}

function issuePath(path: readonly PropertyKey[]): string {
  return path.map((key, i) => (typeof key === 'number' ? `[${key}]` : `${i === 0 ? '' : '.'}${String(key)}`)).join('');
}
