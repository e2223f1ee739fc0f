import test from 'ava';
import type { Pool } from 'pg';
import {
  __testing,
  activateTeamRun,
  closureInputOf,
  createTask,
  createTeamRun,
  deliveredCertificate,
  issueCertificate,
  readBoard,
  recordTaskOutput,
  startTask,
  type RunCompletionCertificate,
} from '../../activities/store/team';
import { withTransaction } from '../../activities/store/db';
import type { Actor } from '../../workflows/team/authority';
import { validateClosure } from '../../workflows/team/closure';
import { memberSessionId } from '../../contract/member-session';
import { testPool, uniqueId } from '../helpers/orchard';

/**
 * One certificate per generation (invariant 15), held by the database (migration 013), not only by the check
 * `issueCertificate` makes under the run row's lock.
 */

/** A team whose board is a full closure: one task, completed by its owner's execution with an output. */
async function closedTeam(pool: Pool): Promise<string> {
  const teamId = uniqueId('cert');
  await createTeamRun(pool, {
    teamId,
    repo: '/srv/repo',
    goal: 'certify it',
    members: [{ memberId: 'implementer', role: 'Implementer', sessionId: memberSessionId(teamId, 'implementer') }],
  });
  await activateTeamRun(pool, teamId, 'first');
  await createTask(pool, teamId, { kind: 'coordinator', turnId: 'plan' }, { taskId: 't1', title: 'implement', owner: 'implementer' });
  await startTask(pool, teamId, 't1', 'exec-1');
  const member: Actor = { kind: 'member', memberId: 'implementer', executionId: 'exec-1' };
  await recordTaskOutput(pool, teamId, member, { taskId: 't1', outputId: 'out-1', summary: 'implemented' });
  return teamId;
}

/** The certificate a caller would ask for now (the validator's verdict on the board), under its own id. */
async function certificateOf(pool: Pool, teamId: string, certificateId: string): Promise<RunCompletionCertificate> {
  const board = await readBoard(pool, teamId);
  const closure = validateClosure(closureInputOf(board, 0));
  if (closure.outcome !== 'delivered') throw new Error(`the fixture is not closed: ${JSON.stringify(closure.reasons)}`);
  return deliveredCertificate(board, closure, { certificateId, summary: certificateId });
}

const rowsOf = async (pool: Pool, teamId: string) =>
  (await pool.query(`SELECT generation, certificate->>'certificateId' AS id FROM team_certificates WHERE team_id = $1`, [teamId])).rows;

// This one held before migration 013 too: issueCertificate checks for the generation's certificate under the run
// row's lock (commit's SELECT … FOR UPDATE), so the second request waits, then finds the first's row.
test('two concurrent certifications of one generation leave one certificate, and both callers get it', async (t) => {
  const pool = await testPool(t);
  const teamId = await closedTeam(pool);
  const coordinator: Actor = { kind: 'coordinator', turnId: 'turn-1' };
  // Two requests of the same generation (a retry racing the first attempt, or two turns), each with its own id.
  const [a, b] = await Promise.all(
    ['cert-a', 'cert-b'].map(async (id) => (await issueCertificate(pool, teamId, coordinator, await certificateOf(pool, teamId, id))).result),
  );
  const rows = await rowsOf(pool, teamId);
  t.is(rows.length, 1);
  t.is(a.certificateId, rows[0].id);
  t.is(b.certificateId, rows[0].id);
});

test('the database refuses a second certificate of a generation, at any revision', async (t) => {
  const pool = await testPool(t);
  const teamId = await closedTeam(pool);
  const first = await certificateOf(pool, teamId, 'cert-first');
  await issueCertificate(pool, teamId, { kind: 'coordinator', turnId: 'turn-1' }, first);
  const err = await t.throwsAsync(
    pool.query(`INSERT INTO team_certificates (team_id, generation, work_revision, certificate) VALUES ($1, $2, $3, $4)`, [
      teamId,
      first.generation,
      first.workRevision + 5,
      JSON.stringify({ ...first, certificateId: 'cert-second', workRevision: first.workRevision + 5 }),
    ]),
  );
  t.is((err as { code?: string }).code, '23505', err?.message);
  t.regex(err?.message ?? '', /team_certificates_one_per_generation/);
  t.deepEqual(
    (await rowsOf(pool, teamId)).map((r) => r.id),
    ['cert-first'],
  );
});

/**
 * Two writers that both passed their checks (no run row lock between them) insert the same generation's
 * certificate: B's insert waits for A's outcome and then answers A's certificate. B assessed the board at the same
 * revision (the old primary key refused B with an error) or at another (the old schema took a second row).
 */
for (const [revisionOffset, how] of [
  [0, 'at the same revision'],
  [1, 'at another revision'],
] as const) {
  test(`two writers past their checks, without the run row lock, ${how}: the insert keeps one certificate and answers it to both`, async (t) => {
    const pool = await testPool(t);
    const teamId = await closedTeam(pool);
    const certA = await certificateOf(pool, teamId, 'cert-a');
    const certB = { ...certA, certificateId: 'cert-b', workRevision: certA.workRevision + revisionOffset };
    // A holds its transaction open after its insert; B's insert of the same generation waits for A's outcome.
    let releaseA!: () => void;
    const aMayCommit = new Promise<void>((resolve) => (releaseA = resolve));
    let aInserted!: () => void;
    const aHasInserted = new Promise<void>((resolve) => (aInserted = resolve));
    const a = withTransaction(pool, async (c) => {
      const stored = await __testing.insertCertificate(c, teamId, certA);
      aInserted();
      await aMayCommit;
      return stored;
    });
    await aHasInserted;
    const b = withTransaction(pool, (c) => __testing.insertCertificate(c, teamId, certB));
    const early = await Promise.race([b.then(() => 'finished'), new Promise((resolve) => setTimeout(() => resolve('waiting'), 300))]);
    releaseA();
    const [storedA, storedB] = await Promise.all([a, b]);
    t.is(early, 'waiting', 'B waits for A');
    t.is(storedA.certificateId, 'cert-a');
    t.is(storedB.certificateId, 'cert-a', 'B answers the certificate A stored, not its own');
    t.deepEqual(
      (await rowsOf(pool, teamId)).map((r) => r.id),
      ['cert-a'],
    );
  });
}
