import test from 'ava';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import type { OrchardError } from '../../contract/errors';
import { teamWorkflowId } from '../../contract/messages';
import { git, makeRepo, uniqueId } from '../helpers/orchard';
import { startScriptedTeam, type Call } from '../helpers/team';

/**
 * Issue 22, deliverable 3: delivery verified by running it. A team started with `verify` runs the command on the
 * result tree before it certifies (sandboxed, on the team's host); a failing command refuses completion with
 * `verification_failed`, its output stored in PostgreSQL, and the run needs attention until a Member's fix makes it
 * pass; the certificate then binds the result commit, its tree, the command, exit code, duration and output digest.
 * `verifyTeam` runs it again on the certified tree. Real stack: dev server, Postgres, sessions, git and bwrap.
 */
const create = (taskId: string, owner: string): Call => ['task_create', { taskId, title: `Do ${taskId}`, description: `work on ${taskId}`, owner }];
const COMPLETE: Call = ['org_run_complete', { summary: 'done' }];

test('a failing verify command refuses completion and needs attention; after a Member fixes it, the certificate binds the passing run', async (t) => {
  // Something outside the certified tree the command reads, visible read-only in the sandbox: a file in the team
  // repository's git dir (bound read-only; /tmp and the worker's HOME are private or hidden there, and a CI clone
  // lives under /tmp). `verifyTeam` later sees the world change.
  const repo = makeRepo();
  const flag = join(repo, '.git', 'orchard-test-broken');
  const command = `cat answer.txt; test -f fixed.txt || { echo "fixed.txt is missing" >&2; exit 1; }; test ! -e ${flag}`;
  const h = await startScriptedTeam(t, {
    plan: [create('a', 'implementer'), ['plan_approve', {}]],
    work: { a: { commit: { 'answer.txt': '42\n' } }, fix: { commit: { 'fixed.txt': 'fixed\n' } } },
    verify: { command, timeoutMs: 60_000 },
    repo,
  });
  await h.until('ready', (v) => v.candidate === 'ready');

  const [refused] = await h.script([COMPLETE]);
  t.regex(refused, /^error \(verification_failed\)/);
  t.regex(refused, /fixed\.txt is missing/, 'the refusal carries the end of the output');
  const attention = await h.until('needs attention', (v) => v.outcome === 'needs_attention');
  t.is(attention.certificate, undefined);
  t.is(attention.verification?.passed, false);
  t.is(attention.verification?.exitCode, 1);
  t.regex(attention.verification!.excerpt, /fixed\.txt is missing/);
  // The run is stored with its whole output; no result branch names an unverified result.
  const failed = (await h.orchard.pool.query(`SELECT * FROM team_verifications WHERE team_id = $1`, [h.teamId])).rows;
  t.is(failed.length, 1);
  t.is(failed[0].exit_code, 1);
  t.is(failed[0].stdout, '42\n');
  t.is(failed[0].stderr, 'fixed.txt is missing\n');
  t.is(failed[0].output_digest, attention.verification!.outputDigest);
  t.throws(() => git(h.repo, 'rev-parse', '--verify', `refs/heads/orchard/team/${h.teamId}/result`));
  t.is((await h.certificates()).length, 0);

  // A Member's fix: once it is on the board the run is ready again, and the command passes on the new result.
  const [created] = await h.script([create('fix', 'reviewer')]);
  t.regex(created, /^created task fix/);
  await h.until('ready again', (v) => v.candidate === 'ready' && v.executions.some((e) => e.taskId === 'fix' && e.state === 'completed'));
  const [delivered] = await h.script([COMPLETE]);
  t.regex(delivered, /^delivered: certificate/);
  const done = await h.until('delivered', (v) => v.outcome === 'delivered');
  t.true(done.certificate?.verified);
  t.true(done.verification?.passed);

  const [{ certificate }] = await h.certificates();
  const bound = certificate.verification;
  t.true(bound.verified);
  t.is(bound.command, command);
  t.is(bound.exitCode, 0);
  t.is(bound.resultHead, certificate.result.head);
  t.is(bound.tree, git(h.repo, 'rev-parse', `${certificate.result.head}^{tree}`));
  t.true(Number.isInteger(bound.durationMs) && bound.durationMs >= 0);
  const row = (await h.orchard.pool.query(`SELECT * FROM team_verifications WHERE verification_id = $1`, [bound.verificationId])).rows[0];
  t.is(row.stdout, '42\n');
  t.is(row.exit_code, 0);
  t.is(bound.outputDigest, `sha256:${createHash('sha256').update(`${row.stdout}\0${row.stderr}`).digest('hex')}`);
  // What the tree holds is the Members' work, merged: both files are in the certified commit.
  t.is(git(h.repo, 'show', `${bound.resultHead}:fixed.txt`), 'fixed');

  // `orchard team verify`: the same command on the certified tree, again; a retry with the same id is the same run.
  const again = await h.orchard.client.verifyTeam(h.teamId, { requestId: 'v1' });
  t.true(again.stillPasses);
  t.true(again.outputMatches);
  t.is(again.run.resultHead, bound.resultHead);
  t.is(again.run.tree, bound.tree);
  t.not(again.run.verificationId, bound.verificationId);
  const repeat = await h.orchard.client.verifyTeam(h.teamId, { requestId: 'v1' });
  t.is(repeat.run.verificationId, again.run.verificationId);
  t.is(Number((await h.orchard.pool.query(`SELECT count(*) AS n FROM team_verifications WHERE team_id = $1`, [h.teamId])).rows[0].n), 3);
  // The world changed under the certified tree: it no longer passes, and says so.
  writeFileSync(flag, 'x');
  const broken = await h.orchard.client.verifyTeam(h.teamId, { requestId: 'v2' });
  t.false(broken.stillPasses);
  t.is(broken.run.exitCode, 1);
  t.is(broken.certified.outputDigest, bound.outputDigest);
});

test('without verify the certificate says the result was not verified, and verifyTeam is refused verification_not_configured', async (t) => {
  const h = await startScriptedTeam(t, { plan: [create('a', 'implementer'), ['plan_approve', {}]] });
  await h.until('ready', (v) => v.candidate === 'ready');
  const [delivered] = await h.script([COMPLETE]);
  t.regex(delivered, /^delivered: certificate/);
  const done = await h.until('delivered', (v) => v.outcome === 'delivered');
  t.false(done.certificate?.verified);
  const [{ certificate }] = await h.certificates();
  t.false(certificate.verification.verified);
  t.regex(certificate.verification.reason, /no verify command/);
  const err = await t.throwsAsync(h.orchard.client.verifyTeam(h.teamId));
  t.is((err as OrchardError).code, 'verification_not_configured');
  t.is(Number((await h.orchard.pool.query(`SELECT count(*) AS n FROM team_verifications WHERE team_id = $1`, [h.teamId])).rows[0].n), 0);
});

test('a verify setting that is not a command is refused before anything starts', async (t) => {
  const h = await startScriptedTeam(t, { plan: [['plan_approve', {}]] });
  const teamId = uniqueId('badverify');
  for (const verify of [{ command: '' }, { command: 'true', timeoutMs: 10 }, { command: 'true', extra: 1 }]) {
    const err = await t.throwsAsync(h.orchard.client.startTeam({ teamId, repo: makeRepo(), host: h.orchard.hostId, goal: 'g', verify: verify as never }));
    t.is((err as OrchardError).code, 'invalid_input', JSON.stringify(verify));
  }
  await t.throwsAsync(h.orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).describe());
});
