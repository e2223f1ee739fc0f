import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import type { Pool } from 'pg';
import { ApplicationFailure } from '@temporalio/common';
import { moveProtectedBranch, planMerge } from '../../activities/git/team-result';
import { savePlannedMerge } from '../../activities/store/team-result';
import { createTeamActivities, createTeamHostActivities } from '../../activities/team';
import { createTask, createTeamRun, readBoard, startTask, type RunCompletionCertificate } from '../../activities/store/team';
import { appendEntry } from '../../activities/store/transcript';
import { memberSessionId } from '../../contract/member-session';
import { git, makeRepo, testPool, uniqueId } from '../helpers/orchard';

/**
 * The team activities that bind code, against real Postgres and a real repository (no workflow: the activities
 * are called as the workflow would). A member's settled execution records its branch head; certification builds
 * the result branch before it issues the certificate, so a branch that cannot be created means no certificate.
 */
async function teamWithEvidence(pool: Pool) {
  const teamId = uniqueId('team-result');
  const repo = makeRepo();
  await createTeamRun(pool, {
    teamId,
    repo,
    goal: 'build it',
    members: [{ memberId: 'implementer', role: 'Implementer', sessionId: memberSessionId(teamId, 'implementer') }],
  });
  await createTask(pool, teamId, { kind: 'coordinator', turnId: 'turn-0' }, { taskId: 'implement', title: 'Implement', owner: 'implementer' });
  await startTask(pool, teamId, 'implement', 'exec-1');
  // The member's branch, with its work committed (as its session would have it).
  const worktree = mkdtempSync(join(tmpdir(), 'orchard-member-'));
  git(repo, 'worktree', 'add', '-q', '-b', `orchard/${memberSessionId(teamId, 'implementer')}/work`, worktree, 'main');
  writeFileSync(join(worktree, 'impl.js'), 'module.exports = 1;\n');
  git(worktree, 'add', 'impl.js');
  git(worktree, 'commit', '-q', '-m', 'impl.js');
  const acts = createTeamActivities({
    pool,
    temporal: () => {
      throw new Error('no Temporal client in this test');
    },
  });
  return { teamId, repo, acts, memberHead: git(worktree, 'rev-parse', 'HEAD') };
}

/** One org_run_complete call of the Coordinator, as the workflow runs it (the call is in the transcript first). */
async function complete(pool: Pool, acts: ReturnType<typeof createTeamActivities>, teamId: string, step: number) {
  const ref = { sessionId: teamId, executionId: 'exec-c', turnId: `turn-${teamId}`, turn: 1, step, callId: `call-${step}` };
  await appendEntry(
    pool,
    { ...ref, ordinal: 0 },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: ref.callId, type: 'function', function: { name: 'org_run_complete', arguments: JSON.stringify({ summary: 'done' }) } }],
    },
  );
  return acts.coordinatorTool({ teamId, ref, index: 0, tool: 'org_run_complete', members: ['implementer'] });
}

const certificates = async (pool: Pool, teamId: string): Promise<RunCompletionCertificate[]> =>
  (await pool.query('SELECT certificate FROM team_certificates WHERE team_id = $1', [teamId])).rows.map((r) => r.certificate);
const hasRef = (repo: string, ref: string) => {
  try {
    git(repo, 'rev-parse', '--verify', '--quiet', ref);
    return true;
  } catch {
    return false;
  }
};

test('a result branch that cannot be created refuses delivery; once it can, the certificate names it, and a repeat puts it back at the same head', async (t) => {
  const pool = await testPool(t);
  const { teamId, repo, acts, memberHead } = await teamWithEvidence(pool);
  const settled = await acts.settleExecution({
    teamId,
    taskId: 'implement',
    executionId: 'exec-1',
    memberId: 'implementer',
    outcome: 'finished',
    excerpt: 'done',
  });
  t.is(settled.candidate, 'ready');
  t.is((await readBoard(pool, teamId)).outputs[0].commitSha, memberHead);

  // A branch named orchard/team makes orchard/team/<id>/result impossible (a file where a directory must be).
  git(repo, 'branch', 'orchard/team', 'main');
  const refused = await complete(pool, acts, teamId, 1);
  t.is(refused.refused, 'git_command_failed');
  t.is(refused.certificate, undefined);
  t.deepEqual(await certificates(pool, teamId), []);
  t.false(hasRef(repo, `refs/heads/orchard/team/${teamId}/result`));

  git(repo, 'branch', '-D', 'orchard/team');
  const delivered = await complete(pool, acts, teamId, 2);
  t.is(delivered.refused, undefined);
  const [certificate] = await certificates(pool, teamId);
  t.like(certificate.result, { branch: `orchard/team/${teamId}/result`, head: memberHead, base: git(repo, 'rev-parse', 'main'), protectedBranch: 'main' });
  t.deepEqual(certificate.result!.commits, [{ taskId: 'implement', outputId: 'out-exec-1', commitSha: memberHead, how: 'fast_forward' }]);
  t.like(delivered.certificate, { certificateId: certificate.certificateId, resultBranch: certificate.result!.branch, resultHead: memberHead });
  t.is(git(repo, 'rev-parse', certificate.result!.branch), memberHead);

  // A retried certification (the stored certificate) repairs the branch and changes nothing else.
  git(repo, 'update-ref', `refs/heads/${certificate.result!.branch}`, 'main');
  const again = await complete(pool, acts, teamId, 3);
  t.deepEqual(again.certificate, delivered.certificate);
  t.deepEqual(await certificates(pool, teamId), [certificate]);
  t.is(git(repo, 'rev-parse', certificate.result!.branch), memberHead);
});

test('a merge retried after the branch moved but before it was recorded finishes the same plan: one merge commit, one user event', async (t) => {
  const pool = await testPool(t);
  const { teamId, repo, acts, memberHead } = await teamWithEvidence(pool);
  await acts.settleExecution({ teamId, taskId: 'implement', executionId: 'exec-1', memberId: 'implementer', outcome: 'finished' });
  const delivered = await complete(pool, acts, teamId, 1);
  const certificateId = delivered.certificate!.certificateId;
  // The user worked on main since: the merge needs a merge commit.
  writeFileSync(join(repo, 'CHANGELOG.md'), 'user work\n');
  git(repo, 'add', 'CHANGELOG.md');
  git(repo, 'commit', '-q', '-m', 'user work');
  const userHead = git(repo, 'rev-parse', 'main');

  // A first attempt planned, stored its plan and moved main, then its worker died before recording the merge.
  const plan = await planMerge(repo, { protectedBranch: 'main', resultHead: memberHead, message: 'first attempt' });
  await savePlannedMerge(pool, {
    teamId,
    certificateId,
    protectedBranch: 'main',
    resultBranch: `orchard/team/${teamId}/result`,
    resultHead: memberHead,
    eventId: `merge-${certificateId}`,
    ...plan,
  });
  t.is(await moveProtectedBranch(repo, 'main', plan), 'moved');
  const commits = git(repo, 'rev-list', '--count', 'main');

  const host = createTeamHostActivities({ pool });
  const retried = await host.mergeTeamResult({ teamId, certificateId });
  t.like(retried.result, { before: userHead, after: plan.after, mode: 'merge_commit', resultHead: memberHead });
  t.is(git(repo, 'rev-parse', 'main'), plan.after);
  t.is(git(repo, 'rev-list', '--count', 'main'), commits, 'no second merge commit');
  const repeated = await host.mergeTeamResult({ teamId, certificateId });
  t.deepEqual(repeated.result, retried.result);
  t.is(repeated.revision, undefined, 'a repeat commits no fact');
  t.is((await pool.query(`SELECT count(*)::int AS n FROM team_facts WHERE team_id = $1 AND kind = 'team_merged'`, [teamId])).rows[0].n, 1);
  t.is((await pool.query(`SELECT count(*)::int AS n FROM team_user_events WHERE team_id = $1 AND kind = 'merge'`, [teamId])).rows[0].n, 1);
});

test('merging a team without a certificate is not_delivered and moves nothing', async (t) => {
  const pool = await testPool(t);
  const { teamId, repo } = await teamWithEvidence(pool);
  const main = git(repo, 'rev-parse', 'main');
  const err = await t.throwsAsync(createTeamHostActivities({ pool }).mergeTeamResult({ teamId, certificateId: `cert-${teamId}-g1-r9` }));
  t.is((err as ApplicationFailure).type, 'not_delivered');
  t.true((err as ApplicationFailure).nonRetryable);
  t.is(git(repo, 'rev-parse', 'main'), main);
});
