/**
 * What create and send results echo back to the orchestrator's model (invariant 3), and what is stripped from
 * text it shows the user (issue 8, item 9). Pure, so the request bytes a test asserts on come from here alone.
 */
import { excerpt } from '../session/state';
import { renderRosterRows, ROSTER_HEADER, ROSTER_PREAMBLE, routableChildren, rosterRow, type RosterChild } from './roster';

/** The literal route command every dispatch result carries. */
export const ROUTE_FIRST = 'ROUTE FIRST — session send <id> <task>';
/** Marks the row of the child a call just dispatched to; the excerpt is the task (create) or relayed brief (send). */
export const JUST_DISPATCHED = '<-- YOU JUST CREATED THIS, IN THE CURRENT TURN:';
const EXCERPT_CHARS = 100;

/**
 * The live roster with the child just dispatched to (listed even when the roster would leave it out), exactly
 * one marker on its row, and the route command.
 */
export function dispatchEcho(children: readonly RosterChild[], dispatched: { childId: string; brief: string }): string {
  const target = children.find((c) => c.childId === dispatched.childId);
  const listed = routableChildren(children);
  const rows = target && !listed.includes(target) ? [...listed, target] : listed;
  const marker = `${JUST_DISPATCHED} "${excerpt(dispatched.brief, EXCERPT_CHARS).replace(/"/g, "'")}"`;
  const roster = renderRosterRows(rows).split('\n');
  const marked = roster.map((line) => (target && line === rosterRow(target) ? `${line} ${marker}` : line));
  return [...marked, ROUTE_FIRST].join('\n');
}

const SCAFFOLDING = [/^\s*ROUTE FIRST\b.*$/, /^\s*Your child sessions\b.*$/, /^\s*id \| title \| agent \| status\s*$/];

/**
 * Text the orchestrator shows the user, without the scaffolding it was given: the roster header, the route
 * command and the dispatch markers, even when the model echoes them back.
 */
export function stripScaffolding(text: string): string {
  return text
    .split('\n')
    .filter((line) => !SCAFFOLDING.some((pattern) => pattern.test(line)))
    .map((line) => line.replace(/\s*<-- YOU JUST [A-Z ]+,? IN THE CURRENT TURN:?(?: "[^"\n]*")?/g, ''))
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/** What stands, in turns after the one it was given in, where a tool result's roster was. */
export const ROSTER_ELIDED = '(stale roster left out; the live one is in the system message)';

/**
 * A tool result of the orchestrator as later turns show it: the roster it ended with (a create or send echo, a
 * `session list`) replaced by ROSTER_ELIDED, since it is stale once its turn ends and every request carries the live
 * one; what the call did (its first lines) stays. Undefined when there is no such roster. The transcript keeps the
 * result whole (`orchard session log`), and the turn that made the call sees it whole.
 */
export function laterView(content: string): string | undefined {
  const block = `${ROSTER_PREAMBLE}\n${ROSTER_HEADER}\n`;
  // Every roster a result carries is its last part (dispatchEcho, `session list`).
  const start = content.startsWith(block) ? 0 : content.indexOf(`\n${block}`) + 1;
  if (start === 0 && !content.startsWith(block)) return undefined;
  return content.slice(0, start) + ROSTER_ELIDED;
}
