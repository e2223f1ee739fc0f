/**
 * Parses the `session` tool's arguments as a model sent them (issue 8, item 6). A well-formed call is taken as
 * it is; a flattened one (fields at the top level instead of under `args`, `sessionId` for `sessionID`) or one
 * missing its operation is read as the send it means when that is unambiguous, and refused with a typed error
 * otherwise. No path turns anything into a create: a create must say `operation: "create"` and carry no session id.
 */
import { MAX_CONTEXT_CHARS, MAX_TASK_CHARS, type Completion } from '../../contract/messages';
import type { SessionCall } from '../../contract/orchestrator-activities';
import { routingCapProblem, utf8Length } from './descriptions';

export type ParsedSessionCall =
  /** `repaired` says how a malformed call was read (for the tool result), when it was. */
  | { readonly ok: true; readonly call: SessionCall; readonly repaired?: string }
  | { readonly ok: false; readonly code: 'session_call_invalid' | 'invalid_input' | 'context_conflict' | 'context_too_large'; readonly message: string };

/**
 * Caps on what a create's model writes and the orchestrator's ledger carries across continue-as-new for as long as the
 * child is open (the routing metadata's are in descriptions.ts): over a cap is refused, never cut short.
 */
export const MAX_TITLE_CHARS = 120;
export const MAX_TOPIC_CHARS = 120;
export const MAX_AGENT_CHARS = 64;

const FIELDS = [
  'sessionID',
  'title',
  'task',
  'agent',
  'topic',
  'routingDescription',
  'routingAliases',
  'completionPolicy',
  'completionGroupId',
  'budgetTokens',
  'notifyOnComplete',
  'triggerTurnOnComplete',
  'includeContext',
  'context',
] as const;
const MAX_GROUP_ID_CHARS = 100;
const SESSION_ID_ALIASES = ['sessionID', 'sessionId', 'session_id', 'sessionid'];

const SHAPES =
  'the shapes are {"operation":"send","args":{"sessionID":"<id>","task":"<task>"}}, ' +
  '{"operation":"create","args":{"title":"<title>","task":"<task>","topic":"<topic>"}}, {"operation":"list","args":{}} ' +
  'and {"operation":"status","args":{"sessionID":"<id>"}}';

function refuse(why: string): ParsedSessionCall {
  return { ok: false, code: 'session_call_invalid', message: `${why}; nothing was done. ${SHAPES}` };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const text = (v: unknown): string | undefined => (typeof v === 'string' && v.trim() !== '' ? v : undefined);

/**
 * `raw` is the tool call's arguments: a JSON string, or already parsed. `caps: false` reads a call that was accepted
 * before the caps existed (a dispatch retried across a deploy must find its task, not a refusal).
 */
export function parseSessionCall(raw: unknown, options: { caps?: boolean } = {}): ParsedSessionCall {
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = raw.trim() === '' ? {} : JSON.parse(raw);
    } catch {
      return refuse('the arguments are not valid JSON');
    }
  }
  if (!isObject(value)) return refuse('the arguments must be a JSON object');
  const nested = value.args ?? value.arguments ?? value.params;
  if (nested !== undefined && !isObject(nested)) return refuse('args must be an object');
  const args: Record<string, unknown> = { ...(nested ?? {}) };
  const flattened: string[] = [];
  const sources: readonly Record<string, unknown>[] = [args, value];
  for (const field of FIELDS) {
    const aliases = field === 'sessionID' ? SESSION_ID_ALIASES : [field];
    const found = sources.flatMap((source) => aliases.filter((a) => source[a] !== undefined).map((alias) => ({ source, alias }))).at(0);
    if (!found) continue;
    args[field] = found.source[found.alias];
    if (found.source === value || found.alias !== field) flattened.push(found.alias);
  }
  const operation = typeof value.operation === 'string' ? value.operation.trim().toLowerCase() : undefined;
  const sessionID = args.sessionID;
  if (sessionID !== undefined && text(sessionID) === undefined) return refuse('sessionID must be a non-empty string');
  const repairs = flattened.length > 0 ? `read ${flattened.join(', ')} as args` : undefined;

  if (operation === undefined) {
    if (value.operation !== undefined) return refuse('operation must be a string');
    // The only call a missing operation can mean is a send: an id and a task. Anything else is refused.
    if (text(sessionID) && text(args.task)) {
      return send(sessionID as string, args.task as string, [repairs, 'no operation given: read as a send'].filter(Boolean).join('; '));
    }
    return refuse('operation is missing (a create must say so)');
  }
  switch (operation) {
    case 'send':
      if (!text(sessionID)) return refuse('send needs args.sessionID: the child to relay the task to');
      if (!text(args.task)) return refuse('send needs args.task: what the child should do');
      return send(sessionID as string, args.task as string, repairs);
    case 'status':
      if (!text(sessionID)) return refuse('status needs args.sessionID');
      return ok({ operation: 'status', sessionID: sessionID as string }, repairs);
    case 'list':
      return ok({ operation: 'list' }, repairs);
    case 'create': {
      if (sessionID !== undefined) {
        return refuse(`create does not take a sessionID (${String(sessionID)}): to give work to an existing child use operation "send"`);
      }
      const context = contextOf(args, options.caps !== false);
      if (context !== undefined && 'code' in context) return { ok: false, ...context };
      const title = text(args.title);
      const task = text(args.task);
      if (!title) return refuse('create needs args.title: one line naming what the child owns');
      if (!task) return refuse('create needs args.task: what the child should do first');
      if (task.length > MAX_TASK_CHARS) return refuse(`the task is ${task.length} characters; the limit is ${MAX_TASK_CHARS}`);
      const aliases = args.routingAliases;
      if (aliases !== undefined && (!Array.isArray(aliases) || aliases.some((a) => typeof a !== 'string'))) {
        return refuse('routingAliases must be an array of strings');
      }
      for (const field of ['agent', 'topic', 'routingDescription'] as const) {
        if (args[field] !== undefined && typeof args[field] !== 'string') return refuse(`${field} must be a string`);
      }
      const tooLong =
        options.caps === false
          ? undefined
          : (capProblem('title', title, MAX_TITLE_CHARS, 'one line naming what the child owns; the detail belongs in task') ??
            capProblem('topic', args.topic as string | undefined, MAX_TOPIC_CHARS, 'a short handle like "PR 1741"') ??
            capProblem('agent', args.agent as string | undefined, MAX_AGENT_CHARS, 'an agent profile name like "coder"') ??
            routingCapProblem(args.routingDescription as string | undefined, aliases as string[] | undefined));
      if (tooLong) return { ok: false, code: 'invalid_input', message: `${tooLong}; nothing was created` };
      const completion = completionOf(args);
      if (typeof completion === 'string') return refuse(completion);
      const budget = args.budgetTokens;
      if (budget !== undefined && (typeof budget !== 'number' || !Number.isSafeInteger(budget) || budget < 1)) {
        return refuse('budgetTokens must be a positive integer (tokens carved from your budget for the child)');
      }
      return ok(
        {
          operation: 'create',
          title,
          task,
          agent: args.agent as string | undefined,
          topic: args.topic as string | undefined,
          routingDescription: args.routingDescription as string | undefined,
          routingAliases: aliases as string[] | undefined,
          completion,
          ...(context ? { context } : {}),
          ...(budget !== undefined ? { budgetTokens: budget } : {}),
        },
        repairs,
      );
    }
    default:
      return refuse(`operation ${JSON.stringify(operation)} is not one of create, send, list, status`);
  }

  function send(id: string, task: string, repaired?: string): ParsedSessionCall {
    if (task.length > MAX_TASK_CHARS) return refuse(`the task is ${task.length} characters; the limit is ${MAX_TASK_CHARS}`);
    return ok({ operation: 'send', sessionID: id, task }, repaired);
  }
}

/**
 * Where a create's child starts (docs/orchestrator.md#context-for-a-new-child): `includeContext: true`, this
 * conversation (by reference); `context`, an explicit handoff; both, refused `context_conflict`; neither, independent.
 */
function contextOf(
  args: Record<string, unknown>,
  caps: boolean,
): Extract<SessionCall, { operation: 'create' }>['context'] | { code: 'session_call_invalid' | 'context_conflict' | 'context_too_large'; message: string } {
  const { includeContext, context } = args;
  const invalid = (why: string) => ({ code: 'session_call_invalid' as const, message: `${why}; nothing was created. ${SHAPES}` });
  if (includeContext !== undefined && typeof includeContext !== 'boolean') return invalid('includeContext must be a boolean');
  if (context !== undefined && (typeof context !== 'string' || context.trim() === '')) return invalid('context must be non-empty text: the handoff');
  if (includeContext === true && context !== undefined) {
    return {
      code: 'context_conflict',
      message:
        'includeContext: true (the child starts from this conversation) and context (an explicit handoff) cannot be combined: ' +
        'give one, or neither for an independent child; nothing was created',
    };
  }
  if (typeof context === 'string') {
    if (caps && context.length > MAX_CONTEXT_CHARS) {
      return {
        code: 'context_too_large',
        message: `the context is ${context.length} characters; the limit is ${MAX_CONTEXT_CHARS}: put the detail in a file, or use includeContext; nothing was created`,
      };
    }
    return { kind: 'handoff', text: context };
  }
  return includeContext === true ? { kind: 'conversation' } : undefined;
}

/** The completion policy a create asks for, or why it cannot be read. `notifyOnComplete` and `triggerTurnOnComplete` mean `each`. */
function completionOf(args: Record<string, unknown>): Completion | string {
  const { completionPolicy: policy, completionGroupId: groupId } = args;
  for (const flag of ['notifyOnComplete', 'triggerTurnOnComplete'] as const) {
    if (args[flag] !== undefined && typeof args[flag] !== 'boolean') return `${flag} must be a boolean`;
  }
  const eachAlias = args.notifyOnComplete !== undefined || args.triggerTurnOnComplete !== undefined;
  if (policy !== undefined && policy !== 'each' && policy !== 'group') return 'completionPolicy must be "each" or "group"';
  if (groupId !== undefined && (typeof groupId !== 'string' || groupId.trim() === '' || groupId.length > MAX_GROUP_ID_CHARS)) {
    return `completionGroupId must be a non-empty string of at most ${MAX_GROUP_ID_CHARS} characters`;
  }
  const group = policy === 'group' || (policy === undefined && groupId !== undefined);
  if (!group) {
    if (groupId !== undefined) return 'completionGroupId needs completionPolicy "group"';
    return { policy: 'each' };
  }
  if (eachAlias) return 'notifyOnComplete and triggerTurnOnComplete mean completionPolicy "each"; they cannot be combined with a group';
  if (groupId === undefined) return 'completionPolicy "group" needs a completionGroupId naming the group';
  return { policy: 'group', groupId: (groupId as string).trim() };
}

/** Caps count UTF-8 bytes: what the orchestrator carries across continue-as-new weighs bytes, not characters. */
function capProblem(field: string, value: string | undefined, max: number, what: string): string | undefined {
  const bytes = value === undefined ? 0 : utf8Length(value);
  return bytes > max ? `${field} is ${bytes} bytes (UTF-8); the limit is ${max}: ${what}` : undefined;
}

function ok(call: SessionCall, repaired?: string): ParsedSessionCall {
  return repaired ? { ok: true, call, repaired } : { ok: true, call };
}

/** Where a dispatch came from: the orchestrator turn, model step and tool call that made it. */
export interface DispatchOrigin {
  readonly turnId: string;
  readonly step: number;
  readonly callId: string;
}

const CALL_ID_KEPT = 64;

/** FNV-1a, 32 bits, as hex: a short deterministic stand-in for a call id too long to carry (no crypto in workflows). */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash.toString(16).padStart(8, '0');
}

/**
 * The request id of a create or send the orchestrator makes for one tool call: the same on every replay and
 * activity retry (turn ids are minted once by the workflow), so the child accepts the dispatch once. A model's
 * call id can be any length; a long one is shortened to a hash so the id stays within the request-id limit.
 */
export function dispatchRequestId(orchestratorWorkflowId: string, origin: DispatchOrigin): string {
  const call = origin.callId.length <= CALL_ID_KEPT ? origin.callId : `${origin.callId.slice(0, 16)}~${fnv1a(origin.callId)}`;
  return `${orchestratorWorkflowId}/${origin.turnId}/${origin.step}/${call}`;
}
