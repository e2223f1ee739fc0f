import test from 'ava';
import { JUST_DISPATCHED, ROSTER_ELIDED, ROUTE_FIRST } from '../../workflows/orchestrator/echo';
import { ROSTER_HEADER } from '../../workflows/orchestrator/roster';
import { calls, currentTurn, final, fleetModel, lastUserText, session, startFleet } from '../helpers/fleet-model';

/**
 * The orchestrator's conversation as its model is sent it (issue 23): the roster a create or send result ended with
 * is stale once its turn ends, so later turns see the result without it (one marker line), and the context budget
 * counts the result as shown. Asserted on the request bytes the stub model received and on the transcript rows.
 */
const CHILDREN = 12;
// Far above what the spawn turn is as later turns see it, far below what it is whole (both checked below).
const CONTEXT_CHARS = 12_000;

test("later turns see the orchestrator's create results without their roster, and the budget counts them so", async (t) => {
  const title = (i: number) => `area ${i} `.padEnd(100, 'x');
  const fleet = await startFleet(
    t,
    fleetModel((ctx) => {
      if (ctx.results.length > 0) return final('Done.');
      if (ctx.text !== 'spawn') return final('Noted.');
      return calls(...Array.from({ length: CHILDREN }, (_, i) => session('create', { title: title(i), task: `start on area ${i}`, topic: `area-${i}` })));
    }),
    { limits: { contextChars: CONTEXT_CHARS } },
  );
  await fleet.say('spawn');
  await fleet.say('anything new?');
  const requests = fleet.orchestratorRequests();

  // In the turn of the calls: each result whole, with the live roster and the route command.
  const spawnTurn = requests.filter((b) => lastUserText(b) === 'spawn').at(-1);
  const whole = currentTurn(spawnTurn.messages).filter((m: any) => m.role === 'tool');
  t.is(whole.length, CHILDREN);
  for (const m of whole) t.true(m.content.includes(ROUTE_FIRST) && m.content.includes(JUST_DISPATCHED), m.content);

  // A later turn: the spawn turn is still there (nothing omitted), its results reduced to what each call did.
  const later = requests.filter((b) => lastUserText(b) === 'anything new?')[0];
  t.false(later.messages[0].content.includes('not shown'), later.messages[0].content);
  t.true(later.messages.some((m: any) => m.role === 'user' && m.content === 'spawn'));
  const earlier = later.messages.filter((m: any) => m.role === 'tool' && m.content.startsWith('created child'));
  t.is(earlier.length, CHILDREN);
  for (const m of earlier) {
    t.regex(m.content, new RegExp(`^created child \\S+ \\(task \\S+\\)\\n${ROSTER_ELIDED.replace(/[()]/g, '\\$&')}$`));
    t.false(m.content.includes(ROSTER_HEADER));
  }
  // The live roster still comes with the request, in the system message.
  t.true(later.messages[0].content.includes(ROSTER_HEADER));

  // The transcript keeps each result whole; only what later turns are shown is shorter.
  const { rows } = await fleet.orchard.pool.query<{ content: string; later_content: string | null }>(
    `SELECT content, later_content FROM transcript_entries WHERE session_id = $1 AND role = 'tool' AND content LIKE 'created child%'`,
    [fleet.id],
  );
  t.is(rows.length, CHILDREN);
  for (const r of rows) t.true(r.content.includes(ROUTE_FIRST) && r.later_content?.endsWith(ROSTER_ELIDED) === true);
  // The premise of the budget check: the spawn turn fits CONTEXT_CHARS only as later turns see it.
  const { rows: sizes } = await fleet.orchard.pool.query<{ whole: number; shown: number }>(
    `SELECT sum(chars)::int AS whole, sum(coalesce(length(later_content), chars))::int AS shown FROM transcript_entries
     WHERE session_id = $1 AND turn_id = (SELECT turn_id FROM transcript_entries WHERE session_id = $1 AND content = 'spawn')`,
    [fleet.id],
  );
  t.true(sizes[0].shown < CONTEXT_CHARS / 2 && sizes[0].whole > CONTEXT_CHARS, JSON.stringify(sizes[0]));
});
