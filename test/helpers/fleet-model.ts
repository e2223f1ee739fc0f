import { orchestratorWorkflowId } from '../../contract/messages';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import { completion, stubModel, type ModelStub, type Reply } from './model-stub';
import { keepHistory, makeRepo, startOrchard, uniqueId, type TestOrchard } from './orchard';
import { waitFor } from './wait';

/**
 * A model for orchestrator tests, served over HTTP by the stub: orchestrator requests (they offer the `session`
 * tool) are answered by the test's `decide`, from the request alone; child requests by `child` (default: a short
 * summary of the task). Either may return a promise, to hold a reply until the test releases it.
 */
interface OrchestratorTurnContext {
  /** The last user message (a user's words, or a manifest of child results). */
  readonly text: string;
  /** Tool results since that message, oldest first (empty on the turn's first step). */
  readonly results: readonly string[];
  readonly body: any;
}

export type Decide = (ctx: OrchestratorTurnContext) => Reply | Promise<Reply>;

let callSeq = 0;
/** A reply that calls tools: `[name, args]` pairs. */
export function calls(...list: [string, unknown][]): Reply {
  return completion(
    {
      tool_calls: list.map(([name, args]) => ({
        id: `call_${++callSeq}`,
        type: 'function',
        function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) },
      })),
    },
    'tool_calls',
  );
}
export const session = (operation: string, args: Record<string, unknown>): [string, unknown] => ['session', { operation, args }];
export const final = (content: string): Reply => completion({ content });

export const isOrchestratorRequest = (body: any): boolean => (body.tools ?? []).some((tool: any) => tool.function.name === 'session');
export const lastUserText = (body: any): string => String(body.messages.filter((m: any) => m.role === 'user').at(-1)?.content ?? '');

/** The messages of a request's current turn: after its last user message. */
export const currentTurn = (messages: any[]): any[] => messages.slice(messages.map((m) => m.role).lastIndexOf('user') + 1);

export function fleetModel(decide: Decide, child?: (body: any) => Reply | Promise<Reply>) {
  return (body: any): Reply | Promise<Reply> => {
    if (!isOrchestratorRequest(body)) return child ? child(body) : completion({ content: `child done: ${lastUserText(body).slice(0, 60)}` });
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    const results = messages
      .slice(lastUser + 1)
      .filter((m) => m.role === 'tool')
      .map((m) => String(m.content));
    return decide({ text: String(messages[lastUser].content), results, body });
  };
}

/** One decision per turn: the first step calls what `first` returns; any later step ends the turn. */
export const oneCallPerTurn =
  (first: (text: string) => Reply): Decide =>
  (ctx) =>
    ctx.results.length === 0 ? first(ctx.text) : final('Done.');

export interface Fleet {
  stub: ModelStub;
  orchard: TestOrchard;
  id: string;
  repo: string;
  /** Orchestrator requests the model received, in order. */
  orchestratorRequests(): any[];
  /**
   * Tool results the orchestrator's model has been shown in the turn of their call (deduplicated, in order of first
   * appearance); later turns show them without their roster (workflows/orchestrator/echo.ts laterView).
   */
  toolResults(): string[];
  settled(turns: number): Promise<import('../../contract/messages').OrchestratorStatusView>;
  /** Sends a user message and waits until the turn that answered it has ended. */
  say(text: string): Promise<import('../../contract/messages').OrchestratorStatusView & { messageId: string }>;
  /**
   * With ORCHARD_KEEP_HISTORIES=1, writes the orchestrator's current run history to test/replay/histories/<name>.json
   * (how the kept orchestrator histories were recorded); otherwise does nothing.
   */
  keepHistory(name: string): Promise<void>;
}

export async function startFleet(
  t: import('ava').ExecutionContext,
  model: (body: any) => Reply | Promise<Reply>,
  options: { limits?: Record<string, number>; databaseUrl?: string } = {},
): Promise<Fleet> {
  const stub = await stubModel(t, model);
  const provider = new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub-model', timeoutMs: 30_000 });
  // `databaseUrl`: the workers reach PostgreSQL there (a fault test's proxy); the test reads it directly.
  const orchard = await startOrchard(t, { defaultProvider: provider, databaseUrl: options.databaseUrl });
  const id = uniqueId('orch');
  const repo = makeRepo();
  await orchard.client.startOrchestrator({ orchestratorId: id, repo, title: 'fleet', limits: options.limits });
  const orchestratorRequests = () => stub.requests.map((r) => r.body).filter(isOrchestratorRequest);
  return {
    stub,
    orchard,
    id,
    repo,
    orchestratorRequests,
    toolResults: () => [
      ...new Set(
        orchestratorRequests().flatMap((b) =>
          currentTurn(b.messages)
            .filter((m: any) => m.role === 'tool')
            .map((m: any) => String(m.content)),
        ),
      ),
    ],
    keepHistory: (name) => keepHistory(orchard, orchestratorWorkflowId(id), name),
    say: async (text) => {
      const { messageId } = await orchard.client.message(id, { text });
      const view = await waitFor(
        async () => {
          const v = await orchard.client.orchestratorStatus(id);
          return v.turns.some((turn) => turn.taskId === messageId) ? v : undefined;
        },
        60_000,
        `the turn answering ${messageId}`,
      );
      return { ...view, messageId };
    },
    settled: (turns) =>
      waitFor(
        async () => {
          const v = await orchard.client.orchestratorStatus(id);
          return v.turnsCompleted >= turns && v.status === 'idle' ? v : undefined;
        },
        60_000,
        `orchestrator ${id} settled after ${turns} turns`,
      ),
  };
}

/** A promise with its resolver, to hold a model reply until the test lets it go. */
export function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}
