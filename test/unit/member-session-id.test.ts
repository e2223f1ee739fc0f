import test from 'ava';
import fc from 'fast-check';
import { createSessionProblem, startTeamProblem } from '../../contract/messages';
import { ordinarySessionIdProblem, sessionIdProblem, slugOf } from '../../contract/ids';
import { legacyMemberSessionId, memberOfSessionId, memberSessionId } from '../../contract/member-session';

/**
 * A team Member's session id (contract/member-session.ts) over every team id and member id a team may be
 * started with: distinct Members never share one, no ordinary create and no orchestrator child can take one, and
 * each is accepted as the session of exactly its own Member.
 */
const RUNS = Number(process.env.ORCHARD_PROPERTY_RUNS ?? 2000);

const startable = (teamId: string, memberId: string) =>
  startTeamProblem({ teamId, repo: '/srv/repo', host: 'h1', goal: 'g', members: [{ memberId, role: 'Implementer' }] }) === undefined;

/**
 * Tiny ids from the characters that make encodings ambiguous (`-`, `_`, `.`: two random pairs then often spell the
 * same text), short ones, and long ones up to the limits.
 */
const teamIdArb = fc
  .oneof(
    { arbitrary: fc.string({ unit: fc.constantFrom('a', '-', '_', '.'), minLength: 1, maxLength: 4 }), weight: 3 },
    { arbitrary: fc.string({ unit: fc.constantFrom('a', 'b', 'Z', '1', '-', '_', '.'), minLength: 1, maxLength: 8 }), weight: 1 },
    { arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/), weight: 1 },
  )
  .filter((id) => startable(id, 'm'));
const memberIdArb = fc
  .oneof(
    { arbitrary: fc.string({ unit: fc.constantFrom('a', '-'), minLength: 1, maxLength: 4 }), weight: 3 },
    { arbitrary: fc.string({ unit: fc.constantFrom('a', 'b', 'c', '1', '-'), minLength: 1, maxLength: 6 }), weight: 1 },
    { arbitrary: fc.stringMatching(/^[a-z][a-z0-9-]{0,23}$/), weight: 1 },
  )
  .filter((id) => startable('t', id));
const pairArb = fc.record({ teamId: teamIdArb, memberId: memberIdArb });

/** What an orchestrator names a child (workflows/orchestrator/workflow.ts): its title's slug and 6 hex digits of a uuid. */
const childIdOf = (title: string, hex: string) => `${slugOf(title, 'child')}-${hex}`;
const hexArb = fc.stringMatching(/^[0-9a-f]{6}$/);
/** The shape of every such id: the slug's characters (at most 40), `-`, 6 hex digits. */
const ORCHESTRATOR_CHILD_ID = /^[a-z0-9-]{1,40}-[0-9a-f]{6}$/;

const memberCreate = (sessionId: string, team?: { teamId: string; memberId: string }) =>
  createSessionProblem({
    sessionId,
    title: 'Implementer of a team',
    repo: '/srv/repo',
    host: 'h1',
    isolated: true,
    requestId: 'r1',
    ...(team ? { team } : {}),
  });

test('the legacy encoding collides across teams; the encoded ids of the same Members do not', (t) => {
  t.is(legacyMemberSessionId('a', 'b-c'), legacyMemberSessionId('a-b', 'c'));
  t.not(memberSessionId('a', 'b-c'), memberSessionId('a-b', 'c'));
  t.is(memberSessionId('release-42', 'implementer'), 'release-42__implementer');
  t.deepEqual(memberOfSessionId('a_b___c'), { teamId: 'a_b_', memberId: 'c' });
});

test('property: distinct (team, member) pairs never share a session id, and each id names its own pair', (t) => {
  fc.assert(
    fc.property(pairArb, pairArb, (a, b) => {
      const same = a.teamId === b.teamId && a.memberId === b.memberId;
      return same === (memberSessionId(a.teamId, a.memberId) === memberSessionId(b.teamId, b.memberId));
    }),
    { numRuns: RUNS },
  );
  // Random pairs seldom spell the same text: also try every other pair made of a prefix and a suffix of the id.
  fc.assert(
    fc.property(pairArb, (a) => {
      const id = memberSessionId(a.teamId, a.memberId);
      for (let i = 1; i < id.length; i++) {
        for (let j = i; j < id.length; j++) {
          const b = { teamId: id.slice(0, i), memberId: id.slice(j) };
          if ((b.teamId !== a.teamId || b.memberId !== a.memberId) && startable(b.teamId, b.memberId) && memberSessionId(b.teamId, b.memberId) === id) {
            return t.fail(`${JSON.stringify(a)} and ${JSON.stringify(b)} share ${id}`);
          }
        }
      }
    }),
    { numRuns: RUNS / 4 },
  );
  fc.assert(
    fc.property(pairArb, ({ teamId, memberId }) => {
      t.deepEqual(memberOfSessionId(memberSessionId(teamId, memberId)), { teamId, memberId });
    }),
    { numRuns: RUNS },
  );
});

test('every pair of short ids (exhaustively) gets its own session id', (t) => {
  const words = (alphabet: string[], max: number): string[] => {
    const out: string[] = [];
    const grow = (prefix: string) => {
      if (prefix) out.push(prefix);
      if (prefix.length < max) for (const c of alphabet) grow(prefix + c);
    };
    grow('');
    return out;
  };
  const teams = words(['a', 'b', '-', '_', '.'], 4).filter((id) => startable(id, 'm'));
  const members = words(['a', 'b', '-'], 4).filter((id) => startable('t', id));
  const seen = new Map<string, string>();
  for (const teamId of teams) {
    for (const memberId of members) {
      const id = memberSessionId(teamId, memberId);
      const pair = `${teamId} + ${memberId}`;
      if (seen.has(id)) return t.fail(`${pair} and ${seen.get(id)} share ${id}`);
      seen.set(id, pair);
    }
  }
  t.log(`${seen.size} pairs, as many ids`);
  t.true(seen.size > 1000);
});

test('property: every encoded id is a session id that its own Member may create and nobody else may', (t) => {
  fc.assert(
    fc.property(pairArb, pairArb, (a, b) => {
      const id = memberSessionId(a.teamId, a.memberId);
      t.is(sessionIdProblem(id), undefined, id);
      t.is(memberCreate(id, a), undefined, id);
      // Not by an ordinary create, nor by another Member (of either encoding).
      t.like(memberCreate(id), { code: 'invalid_input' }, id);
      t.truthy(ordinarySessionIdProblem(id), id);
      if (a.teamId !== b.teamId || a.memberId !== b.memberId) t.like(memberCreate(id, b), { code: 'invalid_input' }, `${id} as ${JSON.stringify(b)}`);
      t.not(legacyMemberSessionId(b.teamId, b.memberId), id);
    }),
    { numRuns: RUNS },
  );
});

test('property: no Member session id has the shape of an orchestrator child, and every child id is an ordinary one', (t) => {
  fc.assert(
    fc.property(fc.string({ maxLength: 60 }), hexArb, pairArb, (title, hex, pair) => {
      const child = childIdOf(title, hex);
      // The shape is the children's real one (so the next check means something).
      t.regex(child, ORCHESTRATOR_CHILD_ID);
      t.is(memberCreate(child), undefined, child);
      t.is(memberOfSessionId(child), undefined, child);
      const id = memberSessionId(pair.teamId, pair.memberId);
      t.notRegex(id, ORCHESTRATOR_CHILD_ID);
      t.not(id, child);
    }),
    { numRuns: RUNS },
  );
});

test('an ordinary create refuses "__" (typed invalid_input) and keeps every other plain id; a team id may not have it either', (t) => {
  const refused = memberCreate('notes__draft');
  t.is(refused?.code, 'invalid_input');
  t.regex(refused?.message ?? '', /reserved: "__" marks a team member's session/);
  for (const ok of ['abc', 'task-42_b.c', 'a_b', 'x'.repeat(64)]) t.is(memberCreate(ok), undefined, ok);
  // A session that already has such an id is still a session (send, status, its worktree and branch).
  t.is(sessionIdProblem('notes__draft'), undefined);
  t.false(startable('a__b', 'm'));
  // The longest team id and member id make a session id longer than a plain one may be: still accepted.
  const longest = memberSessionId('t'.repeat(64), 'm'.repeat(24));
  t.is(longest.length, 90);
  t.is(sessionIdProblem(longest), undefined);
  t.truthy(sessionIdProblem(`${'t'.repeat(65)}__m`), 'the team id part is a plain id');
  t.truthy(sessionIdProblem('a.__b.'), 'git rules still apply');
});

test('a team created before the encoding keeps creating its Members under their old ids', (t) => {
  const team = { teamId: 'release-42', memberId: 'implementer' };
  t.is(memberCreate('release-42-implementer', team), undefined);
  const other = memberCreate('release-42-implementer-x', team);
  t.is(other?.code, 'invalid_input');
  t.regex(other?.message ?? '', /release-42__implementer/);
});
