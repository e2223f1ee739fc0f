import type { Pool } from 'pg';
import { OrchardError } from '../contract/errors';
import type { TemporalPort } from '../contract/temporal-port';
import { parseSessionCall } from '../workflows/orchestrator/session-call';
import { laterView } from '../workflows/orchestrator/echo';
import { excerpt } from '../workflows/session/state';
import { turnKeyOf } from './store/keys';
import { appendEntry, findAssistantMessage } from './store/transcript';
import { projectRoutingCache, readRoutingCache } from './store/routing-cache';
import type { CallRef, DispatchResult, OrchestratorActivities, SessionCallView } from '../contract/orchestrator-activities';

/**
 * The orchestrator's side effects: reading a tool call the model made, starting and sending to children (as
 * independent session workflows, through the same update-with-start and send updates any client uses, with
 * request ids derived from the call so a retry or replay never dispatches twice), and recording tool results.
 * Task text is read from the transcript here, so workflow history carries excerpts only.
 */
export interface OrchestratorActivityDeps {
  pool: Pool;
  /** Temporal on the worker's own connection and task queue. */
  temporal: () => TemporalPort;
}

export function createOrchestratorActivities(deps: OrchestratorActivityDeps): OrchestratorActivities {
  async function callOf(ref: CallRef) {
    const message = await findAssistantMessage(deps.pool, ref.turnId, ref.step);
    const call = message?.tool_calls?.find((c) => c.id === ref.callId);
    if (!call) throw new Error(`no tool call ${ref.callId} in turn ${ref.turn} step ${ref.step}`);
    return call;
  }
  async function dispatchOf(ref: CallRef) {
    // The call was accepted when it was read (caps applied then): here only its task and context are wanted.
    const parsed = parseSessionCall((await callOf(ref)).function.arguments, { caps: false });
    if (!parsed.ok || !('task' in parsed.call)) throw new Error(`tool call ${ref.callId} carries no task`);
    return parsed.call;
  }
  const taskOf = async (ref: CallRef): Promise<string> => (await dispatchOf(ref)).task;
  const failure = (err: unknown): DispatchResult => {
    if (err instanceof OrchardError) return { ok: false, code: err.code, message: err.message };
    throw err;
  };
  return {
    async readOrchestratorCall(ref) {
      const call = await callOf(ref);
      const tool = call.function.name;
      if (tool === 'session') {
        const parsed = parseSessionCall(call.function.arguments);
        if (!parsed.ok) return { tool, ok: false, code: parsed.code, message: parsed.message };
        const c = parsed.call;
        // History carries the task's excerpt and the context's kind; the text stays in the transcript.
        const view: SessionCallView =
          c.operation === 'create'
            ? (({ task, context, ...rest }) => ({ ...rest, taskExcerpt: excerpt(task, 200), ...(context ? { context: context.kind } : {}) }))(c)
            : c.operation === 'send'
              ? (({ task, ...rest }) => ({ ...rest, taskExcerpt: excerpt(task, 200) }))(c)
              : c;
        return { tool, ok: true, call: view, repaired: parsed.repaired };
      }
      try {
        const args = call.function.arguments.trim() === '' ? {} : JSON.parse(call.function.arguments);
        if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new Error('not an object');
        return { tool, ok: true, args };
      } catch {
        return { tool, ok: false, code: 'tool_args_invalid', message: `the arguments of ${tool} are not a JSON object` };
      }
    },
    async createChild(input) {
      try {
        const call = await dispatchOf(input.ref);
        const context = call.operation === 'create' ? call.context : undefined;
        const { ref } = input;
        const created = await deps.temporal().createSession({
          sessionId: input.childId,
          title: input.title,
          agent: input.agent,
          repo: input.repo,
          host: input.host,
          parent: input.parent,
          isolated: true,
          model: input.model,
          ...(input.budgetTokens !== undefined ? { budgetTokens: input.budgetTokens } : {}),
          ...(input.fundedBy !== undefined ? { fundedBy: input.fundedBy } : {}),
          requestId: input.requestId,
          task: call.task,
          // The child starts from this conversation as it stood at this call: a reference, read when the child's
          // model request is built (the orchestrator's words never reach the child's history).
          ...(context?.kind === 'conversation'
            ? { parentConversation: { orchestratorId: ref.sessionId, executionId: ref.executionId, turnId: ref.turnId, turn: ref.turn, step: ref.step } }
            : context?.kind === 'handoff'
              ? { context: context.text }
              : {}),
        });
        return { ok: true, outcome: created.outcome, taskId: created.task?.taskId };
      } catch (err) {
        return failure(err);
      }
    },
    async fundFromParent(input) {
      try {
        await deps.temporal().fundChild(input.parent, { childId: input.childId, limit: input.limit, requestId: input.requestId });
        return { ok: true };
      } catch (err) {
        return failure(err) as { ok: false; code: string; message: string };
      }
    },
    async sendToChild(input) {
      try {
        const sent = await deps.temporal().send(input.childId, { task: await taskOf(input.ref), requestId: input.requestId, from: input.from });
        return { ok: true, taskId: sent.taskId };
      } catch (err) {
        return failure(err);
      }
    },
    /**
     * For `list_orchestrator_agents`: what Temporal says of each child now, and the routing cache rows (returned
     * to be labelled, never to decide anything). Cache rows naming children outside the ledger are inspected too.
     */
    async inspectChildren(input) {
      const cache = await readRoutingCache(deps.pool, input.orchestratorId);
      const ids = [...new Set([...input.childIds, ...cache.map((r) => r.childId)])];
      const inspected = await Promise.all(
        ids.map(async (childId) => {
          const { liveness, runtime } = await deps.temporal().sessionLiveness(childId);
          return { childId, liveness, runtime };
        }),
      );
      return { inspected, cache };
    },
    /** Writes changed ledger rows into the routing cache (a projection; see migration 006). */
    async projectRoutingCache(input) {
      await projectRoutingCache(deps.pool, input.orchestratorId, input.children);
    },
    async recordToolResult(input) {
      await appendEntry(
        deps.pool,
        { ...turnKeyOf(input), step: input.step, ordinal: input.index + 1 },
        { role: 'tool', tool_call_id: input.callId, content: input.content },
        { laterContent: laterView(input.content) },
      );
    },
  };
}
