import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Pool } from 'pg';
import { orchardFailure } from '../../workflows/errors';
import type { ModelSpec } from '../../workflows/messages';
import { TOOL_PROFILES, type ToolProfile } from '../../workflows/tools';
import { appendEntry, findAssistantMessage, loadConversation } from '../store/transcript';
import { recordModelCall } from '../store/usage';
import { systemPrompt, type SessionContext } from './prompt';
import { ModelError, type AssistantMessage, type ModelProvider } from './types';

export interface ModelStepInput {
  sessionId: string;
  turn: number;
  step: number;
  model: ModelSpec;
  profile: ToolProfile;
  context: SessionContext;
}

export interface ModelStepResult {
  /** Ids and names only: the arguments stay in Postgres and the tool activity reads them there. */
  toolCalls: { id: string; name: string }[];
  /** The model's text, cut short for workflow history. */
  textExcerpt?: string;
}

export type ProviderResolver = (spec: ModelSpec) => Promise<ModelProvider>;

const EXCERPT_CHARS = 280;
const HEARTBEAT_MS = 1000;

/**
 * One model call of a turn. The answer is written to the transcript before the activity returns, and
 * a retried attempt that finds it there returns it without calling the model again (no double spend,
 * no divergent answer).
 */
export async function modelStep(pool: Pool, resolve: ProviderResolver, input: ModelStepInput): Promise<ModelStepResult> {
  const recorded = await findAssistantMessage(pool, input.sessionId, input.turn, input.step);
  if (recorded) return summarize(recorded);

  const history = await loadConversation(pool, input.sessionId);
  let provider: ModelProvider;
  try {
    provider = await resolve(input.model);
  } catch (err) {
    throw toFailure(err);
  }
  const context = Context.current();
  // Heartbeats carry cancellation to a long model call; the signal aborts the HTTP request.
  const beat = setInterval(() => context.heartbeat(), HEARTBEAT_MS);
  const started = performance.now();
  let response;
  try {
    response = await provider.complete(
      { messages: [{ role: 'system', content: systemPrompt(input.context) }, ...history], tools: TOOL_PROFILES[input.profile] },
      context.cancellationSignal,
    );
  } catch (err) {
    throw toFailure(err);
  } finally {
    clearInterval(beat);
  }
  await appendEntry(pool, { sessionId: input.sessionId, turn: input.turn, step: input.step, ordinal: 0 }, response.message);
  await recordModelCall(
    pool,
    { sessionId: input.sessionId, turn: input.turn, step: input.step, provider: provider.name, latencyMs: performance.now() - started },
    response,
  );
  // Return what stands in the store: if a concurrent attempt won the insert, its answer is the answer.
  return summarize((await findAssistantMessage(pool, input.sessionId, input.turn, input.step)) ?? response.message);
}

function summarize(message: AssistantMessage): ModelStepResult {
  const text = message.content ?? undefined;
  return {
    toolCalls: (message.tool_calls ?? []).map((call) => ({ id: call.id, name: call.function.name })),
    textExcerpt: text && text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text,
  };
}

/** Retryable provider errors stay retryable (the activity retry policy backs off); the rest fail the step. */
function toFailure(err: unknown): unknown {
  if (!(err instanceof ModelError)) return err;
  if (err.retryable) return ApplicationFailure.retryable(err.message, err.code);
  return orchardFailure(err.code, err.message, err.status === undefined ? undefined : { status: err.status });
}
