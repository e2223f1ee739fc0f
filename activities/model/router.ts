import type { ChatMessage, ModelRequest } from './types';

/**
 * The scripted orchestrator (a scenario's `router`, scenarios/FORMAT.md): it routes a user message from what the
 * request itself carries — the roster rows in the system message and the last message — the same bytes a real
 * model gets. It keeps no state and never looks at the workflow or the database, so whatever it routes right, it
 * routes right because the roster in the request said so.
 */

export interface RouterTopic {
  readonly title: string;
  readonly topic: string;
  readonly keywords: readonly string[];
}

export interface Router {
  readonly topics: readonly RouterTopic[];
  readonly notices: readonly string[];
  readonly reply: string;
  readonly unrouted: string;
}

/** One row of the roster as the request shows it: `id | title | agent | status`. */
export interface RosterRowText {
  readonly id: string;
  readonly title: string;
  readonly agent: string;
  readonly status: string;
}

/** What the router decided: a `session` call's arguments, or a text answer. */
export type RouterDecision =
  { readonly kind: 'call'; readonly arguments: SessionCallArguments; readonly topic: RouterTopic } | { readonly kind: 'text'; readonly content: string };

type SessionCallArguments =
  { operation: 'send'; args: { sessionID: string; task: string } } | { operation: 'create'; args: { title: string; task: string; topic: string } };

const ROSTER_HEADER = 'id | title | agent | status';

/** Lower case, every run of characters that are not letters or digits one space, padded: whole-word matching. */
function words(text: string): string {
  return ` ${text
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim()} `;
}

/**
 * The topic a text is about: the one with the most distinct keywords in it (whole words or phrases, case-folded);
 * on a tie the one listed first. Undefined when no keyword of any topic occurs.
 */
export function topicOf<T extends RouterTopic>(topics: readonly T[], text: string): T | undefined {
  const haystack = words(text);
  let best: { topic: T; score: number } | undefined;
  for (const topic of topics) {
    const score = new Set(topic.keywords.map(words).filter((kw) => kw.trim() !== '' && haystack.includes(kw))).size;
    if (score > 0 && (!best || score > best.score)) best = { topic, score };
  }
  return best?.topic;
}

/** The roster rows under the header line in the request's system message (none when it has no roster). */
export function rosterRowsOf(messages: readonly ChatMessage[]): RosterRowText[] {
  const system = messages.find((m) => m.role === 'system')?.content ?? '';
  const lines = system.split('\n');
  const header = lines.findIndex((line) => line.trim() === ROSTER_HEADER);
  if (header < 0) return [];
  const rows: RosterRowText[] = [];
  for (const line of lines.slice(header + 1)) {
    const cells = line.split(' | ');
    if (cells.length !== 4) break;
    const [id, title, agent, status] = cells.map((c) => c.trim());
    rows.push({ id, title, agent, status });
  }
  return rows;
}

/**
 * The decision for one orchestrator request. Last message a tool result: the final text. Last message a user
 * message that is a notice, or about no topic: a text answer. Otherwise the topic it is about: `send` to the first
 * roster row whose title is about that topic, else `create` a child for it. The task is the user's message as it is.
 */
export function routeRequest(router: Router, request: Pick<ModelRequest, 'messages'>): RouterDecision {
  const last = request.messages[request.messages.length - 1];
  if (!last) return { kind: 'text', content: router.unrouted };
  if (last.role === 'tool') {
    const result = last.content.split('\n')[0].trim();
    return { kind: 'text', content: router.reply.replaceAll('{{result}}', result) };
  }
  if (last.role !== 'user') return { kind: 'text', content: router.unrouted };
  const text = last.content;
  if (router.notices.some((prefix) => text.startsWith(prefix))) return { kind: 'text', content: router.unrouted };
  const topic = topicOf(router.topics, text);
  if (!topic) return { kind: 'text', content: router.unrouted };
  const owner = rosterRowsOf(request.messages).find((row) => topicOf(router.topics, row.title) === topic);
  if (owner) return { kind: 'call', topic, arguments: { operation: 'send', args: { sessionID: owner.id, task: text } } };
  return { kind: 'call', topic, arguments: { operation: 'create', args: { title: topic.title, task: text, topic: topic.topic } } };
}

/** Problems of a router definition that would make it route wrongly by construction (checked when a scenario loads). */
export function routerProblems(router: Pick<Router, 'topics'>): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  router.topics.forEach((topic, i) => {
    const key = words(topic.topic);
    if (seen.has(key)) problems.push(`topics[${i}].topic: "${topic.topic}" is listed twice`);
    seen.add(key);
    // A child created for a topic is found again by its roster title: that title must be about its own topic.
    if (topicOf(router.topics, topic.title) !== topic) {
      problems.push(`topics[${i}].title: "${topic.title}" is not recognised as its own topic (add a keyword it contains)`);
    }
  });
  return problems;
}
