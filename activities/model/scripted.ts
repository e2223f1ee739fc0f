import { coordinateRequest, UnknownMemberError, type CoordinatorDecision } from './coordinator';
import { routeRequest, type RouterDecision } from './router';
import type { Scenario, ScriptedStep, ScriptedTurn } from './scenario';
import { ModelError, type AssistantMessage, type ChatMessage, type ModelProvider, type ModelRequest, type ModelResponse, type ToolCall } from './types';

/**
 * Where a request stands in its scenario, read from the request alone so a retried or replayed call gets
 * the same answer: every `user` message starts a turn, every `assistant` message after it is a step taken.
 * Both are 1-based. (Anything that adds or drops user messages, such as a compacted history, moves the turn.)
 */
function scriptPosition(messages: readonly ChatMessage[], startingMessages = 0): { turn: number; step: number; task?: string } {
  let turn = 0;
  let step = 1;
  let task: string | undefined;
  // The conversation a session started from (after the system message) is none of its turns.
  const own = startingMessages > 0 && messages[0]?.role === 'system' ? [messages[0], ...messages.slice(1 + startingMessages)] : messages;
  for (const message of own) {
    if (message.role === 'user') {
      turn += 1;
      step = 1;
      task = message.content;
    } else if (message.role === 'assistant' && turn > 0) {
      step += 1;
    }
  }
  return { turn, step, task };
}

/** The deterministic answer the scenario scripts for this request, or the ModelError saying why there is none. */
function scriptedResponse(scenario: Scenario, request: ModelRequest): ModelResponse {
  const { turn, step, task } = scriptPosition(request.messages, request.startingMessages);
  const label = `scenario "${scenario.name}"`;
  if (turn === 0) {
    throw new ModelError('scenario_exhausted', `${label}: the request has no user message, so it is in no turn`, false);
  }
  // An orchestrator's request (it offers the session tool) is routed from its own bytes; children follow `turns`.
  if (scenario.router && request.tools.some((tool) => tool.name === 'session')) {
    return respond(scenario, request, routedMessage(routeRequest(scenario.router, request), turn, step));
  }
  // A team Coordinator's request (it offers task_list) is decided from its own bytes; members follow their turns.
  if (scenario.coordinator && request.tools.some((tool) => tool.name === 'task_list')) {
    let decision: CoordinatorDecision;
    try {
      decision = coordinateRequest(scenario.coordinator, request);
    } catch (err) {
      if (err instanceof UnknownMemberError) throw new ModelError('scenario_expectation_failed', `${label}: ${err.message}`, false);
      throw err;
    }
    return respond(scenario, request, coordinatedMessage(decision, turn, step));
  }
  const agent = agentOf(request.messages);
  const memberTurns = agent === undefined ? undefined : scenario.members?.[agent];
  const turns = memberTurns ?? scenario.turns;
  const whose = memberTurns ? `${label}, agent ${agent}` : label;
  if (!turns) {
    throw new ModelError(
      'scenario_exhausted',
      `${label} scripts no turns for agent ${agent ?? '(none named)'}: its members are ${Object.keys(scenario.members ?? {}).join(', ')}`,
      false,
    );
  }
  const last = turns[turns.length - 1];
  const script = turns[turn - 1] ?? (last.repeat ? last : undefined);
  if (!script) {
    throw new ModelError('scenario_exhausted', `${whose} scripts ${turns.length} turn(s); this request is turn ${turn} (it has ${turn} user messages)`, false);
  }
  if (step === 1) checkExpectations(script, request.messages, task ?? '', `${whose}, turn ${turn}`);
  const bound = bindings(script, task ?? '', `${whose}, turn ${turn}`);
  const scripted = stepAt(script, step);
  if (!scripted) {
    throw new ModelError(
      'scenario_exhausted',
      `${whose}, turn ${turn} scripts ${script.steps.length} step(s); this request asks for step ${step} ` +
        `(${step - 1} assistant messages since the last user message)`,
      false,
    );
  }
  return respond(scenario, request, assistantMessage(scripted, turn, step, bound));
}

/** The agent a session's system message names (`You are <agent>, a coding agent …`). */
function agentOf(messages: readonly ChatMessage[]): string | undefined {
  const system = messages.find((m) => m.role === 'system')?.content ?? '';
  return /^You are (\S+), a coding agent/.exec(system)?.[1];
}

/** The turn's `bind` values, read from its task; a pattern that does not match fails the turn. */
function bindings(turn: ScriptedTurn, task: string, where: string): Map<string, string> {
  const values = new Map<string, string>();
  for (const [name, pattern] of Object.entries(turn.bind ?? {})) {
    const match = new RegExp(pattern).exec(task);
    if (!match) {
      throw new ModelError(
        'scenario_expectation_failed',
        `${where} binds {{${name}}} to /${pattern}/, which the task does not match; the task was ${JSON.stringify(excerpt(task))}`,
        false,
      );
    }
    values.set(name, match[1] ?? match[0]);
  }
  return values;
}

/** The Coordinator's decision as the assistant message: its tool calls (ids as for scripted steps), or text. */
function coordinatedMessage(decision: CoordinatorDecision, turn: number, step: number): AssistantMessage {
  if (decision.kind === 'text') return { role: 'assistant', content: decision.content };
  const calls: ToolCall[] = decision.calls.map((call, i) => ({
    id: `call_t${turn}_s${step}_${i + 1}`,
    type: 'function',
    function: { name: call.name, arguments: JSON.stringify(call.arguments) },
  }));
  return { role: 'assistant', content: null, tool_calls: calls };
}

function respond(scenario: Scenario, request: ModelRequest, message: AssistantMessage): ModelResponse {
  const promptTokens = syntheticTokens(JSON.stringify(request.messages) + JSON.stringify(request.tools));
  const completionTokens = syntheticTokens(JSON.stringify(message));
  return {
    message,
    finishReason: message.tool_calls ? 'tool_calls' : 'stop',
    usage: { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens },
    model: scenario.model ?? `scripted-${scenario.name}`,
  };
}

/** The router's decision as the assistant message: one `session` call (id as for scripted steps), or text. */
function routedMessage(decision: RouterDecision, turn: number, step: number): AssistantMessage {
  if (decision.kind === 'text') return { role: 'assistant', content: decision.content };
  const call: ToolCall = {
    id: `call_t${turn}_s${step}_1`,
    type: 'function',
    function: { name: 'session', arguments: JSON.stringify(decision.arguments) },
  };
  return { role: 'assistant', content: null, tool_calls: [call] };
}

function stepAt(turn: ScriptedTurn, step: number): ScriptedStep | undefined {
  const last = turn.steps[turn.steps.length - 1];
  return turn.steps[step - 1] ?? (last.repeat ? last : undefined);
}

function checkExpectations(turn: ScriptedTurn, messages: readonly ChatMessage[], task: string, where: string): void {
  for (const wanted of turn.expect?.taskIncludes ?? []) {
    if (!task.includes(wanted)) {
      throw new ModelError(
        'scenario_expectation_failed',
        `${where} expects the task to include ${JSON.stringify(wanted)}; the task was ${JSON.stringify(excerpt(task))}`,
        false,
      );
    }
  }
  const history = turn.expect?.historyIncludes ?? [];
  if (history.length === 0) return;
  const texts = messages.flatMap(messageTexts);
  for (const wanted of history) {
    if (!texts.some((text) => text.includes(wanted))) {
      throw new ModelError(
        'scenario_expectation_failed',
        `${where} expects the conversation to include ${JSON.stringify(wanted)}, ` + `but none of the request's ${messages.length} messages does`,
        false,
      );
    }
  }
}

/** The text a history expectation can match: contents, and the tool calls an assistant made. */
function messageTexts(message: ChatMessage): string[] {
  const texts = message.content === null ? [] : [message.content];
  if (message.role === 'assistant') {
    for (const call of message.tool_calls ?? []) texts.push(call.function.name, call.function.arguments);
  }
  return texts;
}

function assistantMessage(step: ScriptedStep, turn: number, stepNumber: number, bound: ReadonlyMap<string, string> = new Map()): AssistantMessage {
  const values = new Map<string, string>([...bound, ['turn', String(turn)], ['step', String(stepNumber)]]);
  // In JSON arguments a bound value is escaped as a JSON string body, so a quote in the task cannot break them.
  const fillWith = (text: string, escape: (v: string) => string) =>
    text.replace(/\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}/g, (whole, name: string) => (values.has(name) ? escape(values.get(name)!) : whole));
  const fill = (text: string) => fillWith(text, (v) => v);
  const toolCalls: ToolCall[] = (step.tool_calls ?? []).map((call, i) => ({
    // Unique within the conversation, including replays of a repeated step, and the same on every retry.
    id: `call_t${turn}_s${stepNumber}_${i + 1}`,
    type: 'function',
    function: {
      name: call.name,
      arguments: typeof call.arguments === 'string' ? fill(call.arguments) : fillWith(JSON.stringify(call.arguments), (v) => JSON.stringify(v).slice(1, -1)),
    },
  }));
  return {
    role: 'assistant',
    content: step.content === undefined ? null : fill(step.content),
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
  };
}

/** Roughly what a tokenizer would count; only needs to be stable and plausible for usage accounting. */
function syntheticTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

function excerpt(text: string): string {
  return text.length <= 200 ? text : `${text.slice(0, 200)}…`;
}

/** Answers from a scenario instead of a model: offline runs, the demo and tests drive the real tools with it. */
export class ScriptedProvider implements ModelProvider {
  readonly name = 'scripted';

  constructor(private readonly scenario: Scenario) {}

  get description(): string {
    return `scripted scenario ${this.scenario.name} (it plays a script: a task the script does not expect fails with scenario_expectation_failed)`;
  }

  async complete(request: ModelRequest, signal?: AbortSignal): Promise<ModelResponse> {
    if (signal?.aborted) throw signal.reason;
    return scriptedResponse(this.scenario, request);
  }
}
