import { stripScaffolding } from '../../workflows/orchestrator/echo';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Pool } from 'pg';
import { orchardFailure } from '../../contract/failures';
import { TOOL_PROFILES } from '../../workflows/tools';
import type { ToolProfile } from '../../contract/tools';
import { turnKeyOf, type TurnKey } from '../store/keys';
import { markTaskRunning, taskText } from '../store/tasks';
import { appendEntry, findAssistantMessage, loadConversation } from '../store/transcript';
import { recordModelCall, recordedCharge } from '../store/usage';
import { metrics } from '../metrics';
import { promptFor } from './prompt';
import type { ModelStepInput, ModelStepResult } from '../../contract/activities';
import { ModelError, type AssistantMessage, type ModelProvider, type ModelRequest, type ToolCall } from './types';
import { reservationOf } from './reservation';
import { DEFAULT_LIMITS, type ModelSpec } from '../../contract/messages';
import type { RunningCalls } from '../tools/running-calls';

export type ProviderResolver = (spec: ModelSpec) => Promise<ModelProvider>;

const EXCERPT_CHARS = 280;
/** A tool call's label: enough of the command to recognise it in the Web UI, small enough for history. */
const TOOL_LABEL_CHARS = 100;
/**
 * A session's model call (a child's, a Member's) heartbeats every 10 s: enough for its heartbeat timeout (30 s) to
 * notice a lost worker, and each beat costs the server two state transitions, so a fleet waiting on its model at one
 * a second loaded it measurably (bench scale: a route with 50 of 500 children in a model call went from 1.36x to 0.99x
 * of 10 with this). A cancel would reach the call only with its next beat, and the session's close waits for that: a
 * cancelled session pokes its call (`ModelStepOptions.calls`), which beats at once and so hears its cancellation
 * within a round trip.
 */
const SESSION_MODEL_HEARTBEAT_MS = 10_000;

/**
 * An orchestrator's or a Coordinator's model call beats every second: there is one of them per fleet or team, and
 * nothing pokes it (its run is cancelled through Temporal), so its cancel, and the run's close, hears it within one.
 */
const RUN_MODEL_HEARTBEAT_MS = 1000;

export interface ModelStepOptions {
  /** This worker's running model calls: a cancelled session's `stopCommands` pokes its own (`modelCallKey`). */
  calls?: RunningCalls;
  /** How often a session's call heartbeats (SESSION_MODEL_HEARTBEAT_MS); an orchestrator's or Coordinator's beats every second. */
  sessionHeartbeatMs?: number;
}

/** A model call's key among the running calls: its session's workflow (the holder's chain without its run). */
export function modelCallKey(namespace: string, workflowId: string): string {
  return `${namespace}/${workflowId}`;
}

/**
 * One model call of a turn. The answer is written to the transcript before the activity returns, and
 * a retried attempt that finds it there returns it without calling the model again (no double spend,
 * no divergent answer). The first step of a turn also opens it: the task's text becomes its user message.
 */
export async function modelStep(pool: Pool, resolve: ProviderResolver, input: ModelStepInput, options: ModelStepOptions = {}): Promise<ModelStepResult> {
  const key = turnKeyOf(input);
  const recorded = await findAssistantMessage(pool, key.turnId, input.step);
  if (recorded) return withCharge(summarize(recorded, input.profile), await recordedCharge(pool, key.turnId, input.step));
  if (input.taskId !== undefined) await openTurn(pool, key, input.taskId);

  const { messages: history, omittedTurns, startingMessages } = await loadConversation(pool, key, input.contextChars);
  const request: ModelRequest = {
    messages: [{ role: 'system', content: promptFor(input.profile)({ ...input.context, omittedTurns }) }, ...history],
    tools: TOOL_PROFILES[input.profile],
    ...(startingMessages > 0 ? { startingMessages } : {}),
    ...(input.budget ? { maxTokens: input.budget.maxOutputTokens } : {}),
  };
  // Reserved before it is sent: a call that could pass the budget is not sent at all (the caller ends its turn).
  const reserved = reservationOf(request, input.budget?.maxOutputTokens ?? DEFAULT_LIMITS.maxOutputTokens!);
  if (input.budget && reserved > input.budget.remaining) return { toolCalls: [], refused: { reserved, remaining: input.budget.remaining } };
  let provider: ModelProvider;
  try {
    provider = await resolve(input.model);
  } catch (err) {
    throw toFailure(err);
  }
  const context = Context.current();
  // Heartbeats carry cancellation to a long model call (and tell Temporal the worker lives); the signal aborts
  // the HTTP request. A poke (its session was cancelled) beats at once: the answer carries the cancellation.
  context.heartbeat();
  const sessionCall = input.profile === 'child' || input.profile === 'member';
  const beat = setInterval(() => context.heartbeat(), sessionCall ? (options.sessionHeartbeatMs ?? SESSION_MODEL_HEARTBEAT_MS) : RUN_MODEL_HEARTBEAT_MS);
  const { workflowNamespace, workflowExecution } = context.info;
  // Only a session's call is poked (its cancel's `stopCommands`); an orchestrator's or Coordinator's beats every second.
  const poked =
    sessionCall && workflowNamespace && workflowExecution ? options.calls?.enter(modelCallKey(workflowNamespace, workflowExecution.workflowId)) : undefined;
  poked?.signal.addEventListener('abort', () => context.heartbeat());
  const started = performance.now();
  let response;
  try {
    response = await provider.complete(request, context.cancellationSignal);
  } catch (err) {
    throw toFailure(err);
  } finally {
    clearInterval(beat);
    poked?.done();
  }
  const message = withUniqueCallIds(response.message);
  // The charge is stored before the answer: a retry that finds the answer finds what it cost.
  const recordedNow = await recordModelCall(
    pool,
    { ...key, step: input.step, provider: provider.name, latencyMs: performance.now() - started, reserved },
    response,
  );
  await appendEntry(pool, { ...key, step: input.step, ordinal: 0 }, message);
  if (recordedNow) {
    metrics.modelTokens(input.profile, response.usage);
    if (input.profile === 'coordinator' && input.progressed !== undefined && !message.tool_calls?.length) metrics.coordinatorTurnEnded(input.progressed);
  }
  // Return what stands in the store: if a concurrent attempt won the insert, its answer (and charge) is the answer.
  const answer = summarize((await findAssistantMessage(pool, key.turnId, input.step)) ?? message, input.profile);
  return withCharge(answer, await recordedCharge(pool, key.turnId, input.step));
}

function withCharge(result: ModelStepResult, usage: ModelStepResult['usage']): ModelStepResult {
  return usage ? { ...result, usage } : result;
}

/** The task's text becomes the turn's user message (idempotent), and the task is marked running. */
async function openTurn(pool: Pool, key: TurnKey, taskId: string): Promise<void> {
  const text = await taskText(pool, key.executionId, taskId);
  if (text === undefined) throw orchardFailure('invalid_input', `task ${taskId} of execution ${key.executionId} is not stored`);
  await appendEntry(pool, { ...key, step: 0, ordinal: 0 }, { role: 'user', content: text }, { taskId });
  await markTaskRunning(pool, key.executionId, taskId, key.turnId);
}

/**
 * Tool results are matched to calls by id, and claims are keyed by it: a model that repeats an id (or sends
 * none) would make two calls one. Repeats and blanks get a suffix; the stored message is what the model sees.
 */
function withUniqueCallIds(message: AssistantMessage): AssistantMessage {
  if (!message.tool_calls?.length) return message;
  const seen = new Set<string>();
  const calls: ToolCall[] = message.tool_calls.map((call, i) => {
    let id = call.id.trim() === '' ? `call_${i + 1}` : call.id;
    for (let n = 2; seen.has(id); n++) id = `${call.id || 'call'}_${n}`;
    seen.add(id);
    return id === call.id ? call : { ...call, id };
  });
  return { ...message, tool_calls: calls };
}

/** The step as history keeps it: call ids and names, and the text cut short (an orchestrator's without the scaffolding it was given). */
function summarize(message: AssistantMessage, profile: ToolProfile): ModelStepResult {
  const raw = message.content ?? undefined;
  const text = raw !== undefined && profile === 'orchestrator' ? stripScaffolding(raw) : raw;
  return {
    toolCalls: (message.tool_calls ?? []).map((call) => ({ id: call.id, name: call.function.name, label: toolCallLabel(call) })),
    textExcerpt: text && text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}…` : text,
  };
}

/**
 * The call as a summary line: the tool's name and the argument that says what it does (a command, a path, a task's
 * title), on one line and cut to TOOL_LABEL_CHARS. Arguments that are not JSON give the name alone.
 */
function toolCallLabel(call: ToolCall): string {
  const name = call.function.name.replace(/\s+/g, ' ').trim().slice(0, 40);
  let args: unknown;
  try {
    args = JSON.parse(call.function.arguments || '{}');
  } catch {
    return name;
  }
  const fields = typeof args === 'object' && args !== null ? (args as Record<string, unknown>) : {};
  const key = ['command', 'path', 'title', 'task', 'message', 'text', 'summary', 'id', 'task_id', 'session_id'].find((k) => typeof fields[k] === 'string');
  const detail = key === undefined ? '' : (fields[key] as string).replace(/\s+/g, ' ').trim();
  const label = detail === '' ? name : `${name}: ${detail}`;
  return label.length > TOOL_LABEL_CHARS ? `${label.slice(0, TOOL_LABEL_CHARS - 1)}…` : label;
}

/** Retryable provider errors stay retryable (the activity retry policy backs off); the rest fail the step. */
function toFailure(err: unknown): unknown {
  if (!(err instanceof ModelError)) return err;
  if (err.retryable) return ApplicationFailure.retryable(err.message, err.code);
  return orchardFailure(err.code, err.message, err.status === undefined ? undefined : { status: err.status });
}
