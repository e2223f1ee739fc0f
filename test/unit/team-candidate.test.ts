import test from 'ava';
import fc from 'fast-check';
import { announceReady, NO_CANDIDATE, takeAssessment, type Assessment, type CandidateState } from '../../workflows/team/candidate';

/**
 * Two Members settle at once: implement commits at revision 7 (the board still has test in progress: blocked), test
 * at revision 8 (ready). Their answers reach the workflow test-first; implement's execution is still running there.
 */
test('a ready board heard while another execution runs is announced when that execution ends, whatever order the answers arrive in', (t) => {
  let c: CandidateState = takeAssessment(NO_CANDIDATE, { candidate: 'ready', candidateRevision: 8, revision: 8 });
  let step = announceReady(c, 1);
  t.false(step.announce, 'not while implement still runs here: org_run_complete would be refused turn_running');
  c = takeAssessment(step.next, { candidate: 'blocked', candidateRevision: 7, revision: 7 });
  t.is(c.state, 'ready', 'the older assessment is stale and dropped');
  step = announceReady(c, 0);
  t.true(step.announce);
  t.false(announceReady(step.next, 0).announce, 'each assessed revision is announced once');
  // A later fact that reopens the board, then closes it again, is a new revision: announced again.
  c = takeAssessment(step.next, { candidate: 'blocked', candidateRevision: 9, revision: 9 });
  t.false(announceReady(c, 0).announce);
  c = takeAssessment(c, { candidate: 'ready', candidateRevision: 10, revision: 10 });
  t.true(announceReady(c, 0).announce);
});

test('an answer without candidateRevision (older histories) is placed at its fact’s revision; an answer without a candidate changes nothing', (t) => {
  const c = takeAssessment(NO_CANDIDATE, { candidate: 'ready', revision: 5 });
  t.like(c, { state: 'ready', revision: 5 });
  t.is(takeAssessment(c, { candidate: 'blocked', revision: 4 }), c);
  t.is(takeAssessment(c, { revision: 9 }), c);
});

test('property: whatever order the answers arrive in, the candidate kept is the newest one read', (t) => {
  const answers = fc.uniqueArray(
    fc.record({ candidate: fc.constantFrom('ready', 'blocked', 'not_applicable'), candidateRevision: fc.nat(50), revision: fc.nat(50) }),
    {
      minLength: 1,
      maxLength: 8,
      selector: (a) => a.candidateRevision,
    },
  );
  fc.assert(
    fc.property(
      answers.chain((list) => fc.tuple(fc.constant(list), fc.shuffledSubarray(list, { minLength: list.length, maxLength: list.length }))),
      ([list, order]) => {
        const end = order.reduce<CandidateState>((c, a: Assessment) => takeAssessment(c, a), NO_CANDIDATE);
        const newest = [...list].sort((a, b) => b.candidateRevision - a.candidateRevision)[0];
        return end.state === newest.candidate && end.revision === newest.candidateRevision;
      },
    ),
  );
  t.pass();
});
