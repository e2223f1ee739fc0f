import type { Pool } from 'pg';
import type { TeamMergeResult } from '../../contract/messages';
import { commit, TeamStoreRefusal, type RunCompletionCertificate } from './team';

/**
 * A delivered team's code in PostgreSQL (issue 9, deliverable 8): the result branch a certificate names, and the
 * user's merge of it into the protected branch (migration 011). Git itself is activities/git/team-result.ts; what a
 * certificate records of the result (`TeamResultRecord`) is in team.ts, with the certificate.
 */

export async function teamRunInfo(pool: Pool, teamId: string): Promise<{ repo: string; protectedBranch: string }> {
  const { rows } = await pool.query(`SELECT repo, protected_branch FROM team_runs WHERE team_id = $1`, [teamId]);
  if (!rows[0]) throw new TeamStoreRefusal('team_not_found', `no team run ${teamId}`);
  return { repo: rows[0].repo, protectedBranch: rows[0].protected_branch };
}

/** The generation's certificate (one per generation: the first issued), if it has one. */
export async function findCertificate(pool: Pool, teamId: string, generation: number): Promise<RunCompletionCertificate | undefined> {
  const { rows } = await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 AND generation = $2 ORDER BY work_revision LIMIT 1`, [
    teamId,
    generation,
  ]);
  return rows[0]?.certificate;
}

export async function certificateById(pool: Pool, teamId: string, certificateId: string): Promise<RunCompletionCertificate | undefined> {
  const { rows } = await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 AND certificate->>'certificateId' = $2`, [
    teamId,
    certificateId,
  ]);
  return rows[0]?.certificate;
}

/** The team's newest certificate (highest generation, then revision): the one its result branch follows. */
export async function latestCertificate(pool: Pool, teamId: string): Promise<RunCompletionCertificate | undefined> {
  const { rows } = await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1 ORDER BY generation DESC, work_revision DESC LIMIT 1`, [
    teamId,
  ]);
  return rows[0]?.certificate;
}

export interface TeamMergeRow {
  readonly teamId: string;
  readonly certificateId: string;
  readonly state: 'planned' | 'merged';
  readonly protectedBranch: string;
  readonly resultBranch: string;
  readonly resultHead: string;
  readonly before: string;
  readonly after: string;
  readonly mode: TeamMergeResult['mode'];
  readonly eventId: string;
  readonly mergedAt?: string;
}

function toMerge(r: any): TeamMergeRow {
  return {
    teamId: r.team_id,
    certificateId: r.certificate_id,
    state: r.state,
    protectedBranch: r.protected_branch,
    resultBranch: r.result_branch,
    resultHead: r.result_head,
    before: r.before_sha,
    after: r.after_sha,
    mode: r.mode,
    eventId: r.event_id,
    mergedAt: r.merged_at ? new Date(r.merged_at).toISOString() : undefined,
  };
}

/** The merge answer as the update returns it (a merged row only). */
export function mergeResultOf(row: TeamMergeRow): TeamMergeResult {
  return {
    teamId: row.teamId,
    certificateId: row.certificateId,
    protectedBranch: row.protectedBranch,
    resultBranch: row.resultBranch,
    resultHead: row.resultHead,
    before: row.before,
    after: row.after,
    mode: row.mode,
    eventId: row.eventId,
    mergedAt: row.mergedAt!,
  };
}

export async function readTeamMerge(pool: Pool, teamId: string, certificateId: string): Promise<TeamMergeRow | undefined> {
  const { rows } = await pool.query(`SELECT * FROM team_merges WHERE team_id = $1 AND certificate_id = $2`, [teamId, certificateId]);
  return rows[0] ? toMerge(rows[0]) : undefined;
}

/**
 * Records the plan before the branch moves. A plan already there is replaced only while it is still `planned`
 * (the branch moved under it and it was made again); a `merged` row never changes. Returns the row as stored.
 */
export async function savePlannedMerge(pool: Pool, plan: Omit<TeamMergeRow, 'state' | 'mergedAt'>): Promise<TeamMergeRow> {
  await pool.query(
    `INSERT INTO team_merges (team_id, certificate_id, state, protected_branch, result_branch, result_head, before_sha, after_sha, mode, event_id)
     VALUES ($1, $2, 'planned', $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (team_id, certificate_id) DO UPDATE SET before_sha = EXCLUDED.before_sha, after_sha = EXCLUDED.after_sha, mode = EXCLUDED.mode
     WHERE team_merges.state = 'planned'`,
    [plan.teamId, plan.certificateId, plan.protectedBranch, plan.resultBranch, plan.resultHead, plan.before, plan.after, plan.mode, plan.eventId],
  );
  return (await readTeamMerge(pool, plan.teamId, plan.certificateId))!;
}

/**
 * The branch has moved: the merge is recorded as a user event (kind `merge`) and its fact, once. A repeat finds
 * the row merged and commits nothing.
 */
export async function completeTeamMerge(
  pool: Pool,
  teamId: string,
  certificateId: string,
  eventId: string,
): Promise<{ result: TeamMergeRow; revision: number }> {
  return commit(pool, teamId, { kind: 'user', eventId }, 'user_event', async ({ c }) => {
    const { rows } = await c.query(`SELECT * FROM team_merges WHERE team_id = $1 AND certificate_id = $2 FOR UPDATE`, [teamId, certificateId]);
    if (!rows[0]) throw new TeamStoreRefusal('not_delivered', `no merge of certificate ${certificateId} was planned`);
    const row = toMerge(rows[0]);
    if (row.state === 'merged') return { result: row };
    const updated = await c.query(`UPDATE team_merges SET state = 'merged', merged_at = now() WHERE team_id = $1 AND certificate_id = $2 RETURNING *`, [
      teamId,
      certificateId,
    ]);
    await c.query(`INSERT INTO team_user_events (team_id, event_id, kind, task_id, text) VALUES ($1, $2, 'merge', NULL, $3) ON CONFLICT DO NOTHING`, [
      teamId,
      row.eventId,
      `${row.protectedBranch}: ${row.before} → ${row.after} (${row.mode}, certificate ${certificateId})`,
    ]);
    return {
      result: toMerge(updated.rows[0]),
      fact: {
        kind: 'team_merged',
        detail: { eventId: row.eventId, certificateId, protectedBranch: row.protectedBranch, before: row.before, after: row.after, mode: row.mode },
      },
    };
  });
}
