import test from 'ava';
import { JUST_DISPATCHED, ROSTER_ELIDED, ROUTE_FIRST, dispatchEcho, laterView, stripScaffolding } from '../../workflows/orchestrator/echo';
import { renderRoster, type ChildStatus, type RosterChild } from '../../workflows/orchestrator/roster';

const child = (childId: string, status: ChildStatus, lastActivity: number): RosterChild => ({
  childId,
  title: `title of ${childId}`,
  agent: 'coder',
  status,
  lastActivity,
});

const markers = (text: string) => text.split(JUST_DISPATCHED).length - 1;

test('a dispatch echo carries the live roster, the route command and exactly one marker, on the dispatched row', (t) => {
  const children = [child('a', 'running', 3), child('b', 'idle', 2), child('c', 'idle', 1)];
  const echo = dispatchEcho(children, { childId: 'b', brief: 'rerun the "flaky" suite' });
  const lines = echo.split('\n');
  t.is(markers(echo), 1);
  t.true(lines.find((l) => l.includes(JUST_DISPATCHED))!.startsWith('b | title of b | coder | idle'));
  t.is(lines.at(-1), ROUTE_FIRST);
  t.true(['a', 'b', 'c'].every((id) => lines.some((l) => l.startsWith(`${id} | `))));
});

test('the child just dispatched to is listed even when the roster would leave it out', (t) => {
  const children = [...Array.from({ length: 6 }, (_, i) => child(`idle-${i}`, 'idle', 10 + i)), child('old', 'idle', 1)];
  t.false(renderRoster(children).includes('old | '));
  const echo = dispatchEcho(children, { childId: 'old', brief: 'pick up the old topic again' });
  t.is(markers(echo), 1);
  t.true(echo.split('\n').some((l) => l.startsWith('old | ') && l.includes(JUST_DISPATCHED)));
});

test('text shown to the user keeps the answer and loses every piece of scaffolding the model echoed', (t) => {
  const children = [child('pr-1741', 'running', 1)];
  const echoed = `I routed it.\n${dispatchEcho(children, { childId: 'pr-1741', brief: 'fix it' })}\nThe child is on it.`;
  const shown = stripScaffolding(echoed);
  t.notRegex(shown, /ROUTE FIRST|YOU JUST|id \| title \| agent \| status|Your child sessions/);
  t.true(shown.startsWith('I routed it.'));
  t.true(shown.endsWith('The child is on it.'));
  t.is(stripScaffolding('plain answer, nothing to strip'), 'plain answer, nothing to strip');
});

test('later turns see a result without its roster: what the call did stays, the stale roster becomes one marker', (t) => {
  const children = [child('a', 'running', 3), child('b', 'idle', 2)];
  const created = `created child a (task t1)\n${dispatchEcho(children, { childId: 'a', brief: 'start' })}`;
  t.is(laterView(created), `created child a (task t1)\n${ROSTER_ELIDED}`);
  const routed = `includeContext was not used: a already has its own conversation\nsent to a (task t2)\n${dispatchEcho(children, { childId: 'a', brief: 'more' })}`;
  t.is(laterView(routed), `includeContext was not used: a already has its own conversation\nsent to a (task t2)\n${ROSTER_ELIDED}`);
  // `session list`: the result is the roster.
  t.is(laterView(renderRoster(children)), ROSTER_ELIDED);
  // No roster (or a roster quoted inside a line): shown as it is.
  t.is(laterView('error (session_closed): child a is closed; nothing was sent'), undefined);
  t.is(laterView(`error (session_not_found): no child z in your roster; nothing was created. ${renderRoster(children)}`), undefined);
  t.is(laterView(renderRoster([])), undefined);
});
