import { randomUUID } from 'node:crypto';
import { orchestratorWorkflowId, sessionWorkflowId, type OrchestratorStatusView } from '../contract/messages';
import type { RunningOrchard } from '../worker/runtime';
import { completion, type ModelStub, type Reply } from '../test/helpers/model-stub';
import { startBenchStack } from './stack';

/** One orchestrator of the fleet's stack. */
export interface FleetOrchestrator {
  readonly orchestratorId: string;
  readonly workflowId: string;
  /**
   * Waits until the orchestrator has no turn running and nothing queued. Child results that arrived but are not yet
   * queued do not show in its status: wait for their manifest (`manifestOf`) first.
   */
  settled(timeoutMs?: number): Promise<OrchestratorStatusView>;
}

/**
 * An orchestrator and its fleet on a bench stack of its own (bench/stack.ts), for the route and scale sections, with a
 * stub model that plays the orchestrator's model and its children's from the request bytes alone:
 *
 * - orchestrator requests (they offer the `session` tool), by the last user message: `route <token> to <child>` →
 *   `session send` of the task `<token>` to that child; `fanout <token>:<child> …` → one such send per pair, all in one
 *   step; `create <token>` → `session create` of a child whose first task
 *   is `<token>`; `spawn <from> <to>` → one `session create` per child number in [from, to), all in one step; a
 *   manifest of child results, or any later step of a turn → a final answer;
 * - child requests answer `done <token>` at once, unless the token is held (`hold`), and report when the first
 *   request carrying a token arrives (`childTurnStart`): the child's turn start.
 *
 * Tokens are `tok-<letters>-<digits>`, unique per measurement, and across the stack's orchestrators (`addOrchestrator`).
 */
export interface Fleet extends FleetOrchestrator {
  readonly orchard: RunningOrchard;
  readonly stub: ModelStub;
  /** Another orchestrator on the same stack, played by the same stub (tokens are unique across orchestrators). */
  addOrchestrator(title: string): Promise<FleetOrchestrator>;
  /** Resolves with `performance.now()` when the first child request carrying `token` reaches the stub. */
  childTurnStart(token: string): Promise<number>;
  /** Resolves with `performance.now()` when the orchestrator's first model request for a message naming `token` arrives. */
  orchestratorTurnStart(token: string): Promise<number>;
  /** Resolves when an orchestrator request whose manifest of child results names `token` reaches the stub. */
  manifestOf(token: string): Promise<void>;
  /** Child requests carrying a token `held` accepts wait for `release()` before they are answered. */
  hold(held: (token: string) => boolean): { release(): void };
  /** Bytes of the last orchestrator request body the stub received. */
  lastOrchestratorRequestBytes(): number;
  /** Cancels every orchestrator and every child (so no activity runs on), then stops the stack. */
  stop(): Promise<void>;
}

const TOKEN = /tok-[a-z]+-\d+/g;

let callSeq = 0;
const toolCalls = (calls: { operation: string; args: Record<string, unknown> }[]): Reply =>
  completion(
    {
      tool_calls: calls.map((args) => ({ id: `call_${++callSeq}`, type: 'function', function: { name: 'session', arguments: JSON.stringify(args) } })),
    },
    'tool_calls',
  );
const final = (content: string): Reply => completion({ content });

function lastUser(body: any): { text: string; after: any[] } {
  const messages: any[] = body.messages;
  const at = messages.map((m) => m.role).lastIndexOf('user');
  return { text: String(messages[at]?.content ?? ''), after: messages.slice(at + 1) };
}

/** One-shot waiters by token: a waiter registered after its event still resolves (the event is remembered). */
class Waiters<T> {
  private readonly waiting = new Map<string, (value: T) => void>();
  private readonly seen = new Map<string, T>();
  wait(token: string): Promise<T> {
    const seen = this.seen.get(token);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise<T>((resolve) => this.waiting.set(token, resolve));
  }
  fire(token: string, value: T): void {
    if (this.seen.has(token)) return;
    this.seen.set(token, value);
    this.waiting.get(token)?.(value);
    this.waiting.delete(token);
  }
}

export async function startFleet(log: (line: string) => void = () => undefined): Promise<Fleet> {
  const starts = new Waiters<number>();
  const turns = new Waiters<number>();
  const manifests = new Waiters<true>();
  const holds: { held: (token: string) => boolean; gate: Promise<void> }[] = [];
  let orchestratorBytes = 0;

  const model = async (body: any): Promise<Reply> => {
    // The stub keeps every request it received; this one keeps none (they would count in the RSS the scale measures).
    const [received] = stub.requests.splice(0);
    const { text, after } = lastUser(body);
    if ((body.tools ?? []).some((t: any) => t.function.name === 'session')) {
      orchestratorBytes = Number(received?.headers['content-length'] ?? JSON.stringify(body).length);
      if (after.some((m) => m.role === 'tool')) return final('Done.');
      const now = performance.now();
      for (const token of text.match(TOKEN) ?? []) turns.fire(token, now);
      if (text.startsWith('Child results')) {
        for (const token of text.match(TOKEN) ?? []) manifests.fire(token, true);
        return final('Noted.');
      }
      const route = /^route (tok-[a-z]+-\d+) to (\S+)$/.exec(text);
      if (route) return toolCalls([{ operation: 'send', args: { sessionID: route[2], task: `${route[1]}: relayed by the orchestrator` } }]);
      if (text.startsWith('fanout ')) {
        const pairs = [...text.matchAll(/(tok-[a-z]+-\d+):(\S+)/g)];
        return toolCalls(pairs.map(([, token, sessionID]) => ({ operation: 'send', args: { sessionID, task: `${token}: relayed by the orchestrator` } })));
      }
      const create = /^create (tok-[a-z]+-\d+)$/.exec(text);
      if (create) return toolCalls([{ operation: 'create', args: { title: `child ${create[1]}`, task: `${create[1]}: first task` } }]);
      const spawn = /^spawn (\d+) (\d+)$/.exec(text);
      if (spawn) {
        const calls = [];
        for (let i = Number(spawn[1]); i < Number(spawn[2]); i++) {
          calls.push({ operation: 'create', args: { title: `worker ${i}`, task: `tok-w-${i}: start on area ${i}`, topic: `area-${i}` } });
        }
        return toolCalls(calls);
      }
      return final('Noted.');
    }
    const token = text.match(TOKEN)?.[0];
    if (token === undefined) return final('done');
    starts.fire(token, performance.now());
    for (const h of holds) if (h.held(token)) await h.gate;
    return final(`done ${token}`);
  };

  const bench = await startBenchStack(model, { modelTimeoutMs: 120_000, shutdownGraceSeconds: 5, log });
  const { orchard, stub } = bench;
  const { client } = orchard;
  const orchestrators: FleetOrchestrator[] = [];
  const addOrchestrator = async (title: string): Promise<FleetOrchestrator> => {
    const orchestratorId = `bench-${randomUUID().slice(0, 8)}`;
    await client.startOrchestrator({ orchestratorId, repo: bench.repo, title });
    const settled = async (timeoutMs = 300_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = await client.orchestratorStatus(orchestratorId);
        if (v.status === 'idle' && v.queued === 0) return v;
        if (Date.now() > deadline) throw new Error(`bench: orchestrator ${orchestratorId} not settled after ${timeoutMs} ms (${v.status}, ${v.queued} queued)`);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    const added = { orchestratorId, workflowId: orchestratorWorkflowId(orchestratorId), settled };
    orchestrators.push(added);
    return added;
  };
  const first = await addOrchestrator('bench fleet');

  return {
    orchard,
    stub,
    ...first,
    addOrchestrator,
    childTurnStart: (token) => starts.wait(token),
    orchestratorTurnStart: (token) => turns.wait(token),
    manifestOf: (token) => manifests.wait(token).then(() => undefined),
    hold: (held) => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const entry = { held, gate };
      holds.push(entry);
      return {
        release: () => {
          holds.splice(holds.indexOf(entry), 1);
          release();
        },
      };
    },
    lastOrchestratorRequestBytes: () => orchestratorBytes,
    // Up to 500 children to cancel: a longer bound than a section's own close.
    stop: () => bench.stop(() => cancelFleet(orchard, orchestrators), 300_000),
  };
}

/** The orchestrators first (so no close notice starts a turn), then their children, a few at a time; each until closed. */
async function cancelFleet(orchard: RunningOrchard, orchestrators: readonly FleetOrchestrator[]): Promise<void> {
  const { client } = orchard;
  const temporal = client.temporal;
  const queue: string[] = [];
  for (const { orchestratorId, workflowId } of orchestrators) {
    queue.push(...(await client.orchestratorStatus(orchestratorId)).children.map((c) => c.childId));
    const handle = temporal.workflow.getHandle(workflowId);
    await handle.cancel();
    await handle.result().catch(() => undefined);
  }
  const worker = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      await client.cancel(id, 'bench finished').catch(() => undefined);
      await temporal.workflow
        .getHandle(sessionWorkflowId(id))
        .result()
        .catch(() => undefined);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}
