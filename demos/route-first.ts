/**
 * The `route-first` demo (`orchard demo route-first`, and `npm start` after the single-session demo): an
 * orchestrator played by the scripted router gets a scenario's user messages one after another, and the result is
 * checked against the orchestrator's own ledger — exactly one child per topic, every message delivered to the
 * child that owns its topic.
 */
import { loadScenario } from '../activities/model/scenario';
import type { OrchestratorChildView, OrchestratorDelivery, OrchestratorStatusView, TurnOutcome } from '../contract/messages';
import { topicKey } from '../workflows/orchestrator/topic';
import { OrchardError, type OrchardClient } from '../client/client';

interface RouteFirstMessage {
  readonly index: number;
  readonly messageId: string;
  readonly text: string;
  /** The topic the scenario says the message is about. */
  readonly topic: string;
  /** The child its turn dispatched to (the first dispatch, if there were several), and how. */
  readonly childId?: string;
  readonly via?: OrchestratorDelivery['via'];
  readonly dispatches: number;
  readonly outcome: TurnOutcome;
}

export interface RouteFirstResult {
  readonly orchestratorId: string;
  readonly children: readonly OrchestratorChildView[];
  readonly deliveries: readonly OrchestratorDelivery[];
  readonly messages: readonly RouteFirstMessage[];
  /** What the check found wrong; empty when it passed. */
  readonly problems: readonly string[];
}

export interface RouteFirstOptions {
  readonly orchestratorId: string;
  /** The repository the children work on (a path on the host). */
  readonly repo: string;
  /** Absolute path of the scenario, readable by the worker: it plays the orchestrator and its children. */
  readonly scenario: string;
  readonly host?: string;
  readonly log?: (line: string) => void;
  /** Per message: how long its turn may take. */
  readonly turnTimeoutMs?: number;
}

export async function runRouteFirst(client: OrchardClient, options: RouteFirstOptions): Promise<RouteFirstResult> {
  const log = options.log ?? (() => undefined);
  const scenario = await loadScenario(options.scenario);
  const script = scenario.messages ?? [];
  if (!scenario.router || script.length === 0) {
    throw new OrchardError('scenario_invalid', `scenario ${options.scenario} needs a router and messages to send (scenarios/FORMAT.md)`);
  }
  const model = { provider: 'scripted' as const, scenario: options.scenario };
  await client.startOrchestrator({
    orchestratorId: options.orchestratorId,
    repo: options.repo,
    host: options.host,
    title: `route-first demo (${scenario.name})`,
    model,
    childModel: model,
  });
  log(`started orchestrator ${options.orchestratorId}`);
  const sent: { messageId: string; text: string; topic: string; outcome: TurnOutcome }[] = [];
  for (const [i, m] of script.entries()) {
    const { messageId } = await client.message(options.orchestratorId, { text: m.text, requestId: `${options.orchestratorId}/${i + 1}` });
    const { turn } = await client.waitForMessageTurn(options.orchestratorId, messageId, { timeoutMs: options.turnTimeoutMs });
    sent.push({ messageId, text: m.text, topic: m.topic, outcome: turn.outcome });
    log(`message ${i + 1}/${script.length} (${messageId}) turn ${turn.turn} ${turn.outcome}: ${turn.finalExcerpt ?? ''}`);
  }
  const status = await client.orchestratorStatus(options.orchestratorId);
  return { ...checkRouteFirst(sent, status), orchestratorId: options.orchestratorId };
}

/**
 * The check, from the orchestrator's status alone: one child per topic (the child whose topic key is the topic's),
 * no other child, and each message's turn dispatched exactly once, to the child that owns its topic.
 */
function checkRouteFirst(
  sent: readonly { messageId: string; text: string; topic: string; outcome: TurnOutcome }[],
  status: Pick<OrchestratorStatusView, 'children' | 'deliveries'>,
): Omit<RouteFirstResult, 'orchestratorId'> {
  const problems: string[] = [];
  const topics = [...new Set(sent.map((m) => m.topic))];
  if (status.children.length !== topics.length) {
    problems.push(`expected exactly ${topics.length} children (one per topic), found ${status.children.length}`);
  }
  const ownerOf = new Map<string, OrchestratorChildView>();
  for (const topic of topics) {
    const owners = status.children.filter((c) => c.topicKey === topicKey(topic));
    if (owners.length !== 1) problems.push(`topic ${topic}: ${owners.length} children own it, expected 1`);
    if (owners[0]) ownerOf.set(topic, owners[0]);
  }
  const messages = sent.map((m, index): RouteFirstMessage => {
    const dispatches = status.deliveries.filter((d) => d.messageId === m.messageId);
    const first = dispatches[0];
    const owner = ownerOf.get(m.topic);
    const where = `message ${index + 1} (${m.messageId})`;
    if (m.outcome !== 'finished') problems.push(`${where}: its turn ended ${m.outcome}`);
    if (dispatches.length !== 1) problems.push(`${where}: ${dispatches.length} dispatches, expected 1`);
    else if (!owner || first.childId !== owner.childId) {
      problems.push(`${where}: delivered to ${first.childId}, but topic ${m.topic} is owned by ${owner?.childId ?? 'no child'}`);
    }
    return {
      index: index + 1,
      messageId: m.messageId,
      text: m.text,
      topic: m.topic,
      childId: first?.childId,
      via: first?.via,
      dispatches: dispatches.length,
      outcome: m.outcome,
    };
  });
  return { children: status.children, deliveries: status.deliveries, messages, problems };
}

/** The result as a table: message → child, via create | topic | send; then the children and the verdict. */
export function formatRouteFirst(result: RouteFirstResult): string {
  const short = (text: string, n: number) => (text.length <= n ? text : `${text.slice(0, n - 1)}…`);
  const idWidth = Math.max(5, ...result.messages.map((m) => (m.childId ?? '-').length));
  const lines = [
    `${'#'.padEnd(3)} ${'message'.padEnd(60)} ${'child'.padEnd(idWidth)} via`,
    ...result.messages.map((m) => `${String(m.index).padEnd(3)} ${short(m.text, 60).padEnd(60)} ${(m.childId ?? '-').padEnd(idWidth)} ${m.via ?? '-'}`),
    '',
    `children (${result.children.length}):`,
    ...result.children.map((c) => `  ${c.childId} | ${c.title} | topic ${c.topicKey ?? '-'} | ${c.status}`),
    '',
    result.problems.length === 0
      ? `route-first: ok: ${result.children.length} children, each of the ${result.messages.length} messages delivered to the child that owns its topic`
      : `route-first: FAILED:\n${result.problems.map((p) => `  - ${p}`).join('\n')}`,
  ];
  return lines.join('\n');
}
