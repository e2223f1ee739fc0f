import type { Pool, PoolClient } from 'pg';
import { DEFAULT_VERIFY_TIMEOUT_MS, type CertificateVerification, type VerificationView, type VerifySpec } from '../../contract/messages';
import type { VerificationRun } from '../git/verify-result';

/** A team run's verify command (set by each activation; undefined: the run is delivered on its board alone). */
export async function verifySpecOf(db: Pool | PoolClient, teamId: string): Promise<Required<VerifySpec> | undefined> {
  const { rows } = await db.query(`SELECT verify FROM team_runs WHERE team_id = $1`, [teamId]);
  const spec = rows[0]?.verify as VerifySpec | null | undefined;
  return spec ? { command: spec.command, timeoutMs: spec.timeoutMs ?? DEFAULT_VERIFY_TIMEOUT_MS } : undefined;
}

export interface StoredVerification extends VerificationRun {
  readonly verificationId: string;
  readonly teamId: string;
  readonly purpose: 'completion' | 'recheck';
  readonly certificateId?: string;
}

const EXCERPT_CHARS = 2000;

/** The end of what it wrote (stderr after stdout), at most 2000 characters. */
function excerptOf(v: Pick<VerificationRun, 'stdout' | 'stderr'>): string {
  const all = [v.stdout.trimEnd(), v.stderr.trimEnd()].filter(Boolean).join('\n');
  return all.length <= EXCERPT_CHARS ? all : `…${all.slice(all.length - EXCERPT_CHARS + 1)}`;
}

const verificationPassed = (v: Pick<VerificationRun, 'exitCode' | 'timedOut'>): boolean => v.exitCode === 0 && !v.timedOut;

export function verificationView(v: StoredVerification): VerificationView {
  return {
    verificationId: v.verificationId,
    command: v.command,
    resultHead: v.resultHead,
    tree: v.tree,
    exitCode: v.exitCode,
    timedOut: v.timedOut,
    durationMs: v.durationMs,
    outputDigest: v.outputDigest,
    confined: v.confined,
    passed: verificationPassed(v),
    excerpt: excerptOf(v),
  };
}

/** What a certificate binds of a passing verification. */
export function certifiedVerification(v: StoredVerification): CertificateVerification {
  const { passed: _passed, excerpt: _excerpt, ...bound } = verificationView(v);
  return { verified: true, ...bound };
}

function rowOf(r: any): StoredVerification {
  return {
    verificationId: r.verification_id,
    teamId: r.team_id,
    purpose: r.purpose,
    ...(r.certificate_id ? { certificateId: r.certificate_id } : {}),
    resultHead: r.result_head,
    tree: r.tree,
    command: r.command,
    exitCode: r.exit_code,
    signal: r.signal,
    timedOut: r.timed_out,
    durationMs: r.duration_ms,
    confined: r.confined,
    outputDigest: r.output_digest,
    stdout: r.stdout,
    stderr: r.stderr,
    outputTruncated: r.output_truncated,
  };
}

export async function findVerification(db: Pool | PoolClient, verificationId: string): Promise<StoredVerification | undefined> {
  const { rows } = await db.query(`SELECT * FROM team_verifications WHERE verification_id = $1`, [verificationId]);
  return rows[0] ? rowOf(rows[0]) : undefined;
}

/** Stores a verification once: a retried attempt that ran it again keeps the first run's record (and gets it back). */
export async function recordVerification(pool: Pool, v: StoredVerification): Promise<StoredVerification> {
  await pool.query(
    `INSERT INTO team_verifications (verification_id, team_id, purpose, certificate_id, result_head, tree, command, exit_code, signal,
       timed_out, duration_ms, confined, output_digest, stdout, stderr, output_truncated)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (verification_id) DO NOTHING`,
    [
      v.verificationId,
      v.teamId,
      v.purpose,
      v.certificateId ?? null,
      v.resultHead,
      v.tree,
      v.command,
      v.exitCode,
      v.signal,
      v.timedOut,
      v.durationMs,
      v.confined,
      v.outputDigest,
      v.stdout,
      v.stderr,
      v.outputTruncated,
    ],
  );
  return (await findVerification(pool, v.verificationId))!;
}

/**
 * Why a certificate may not be issued for a run with a verify command (checked in the certificate's transaction):
 * it must bind a stored, passing run of that command on the result it names. Undefined when it may.
 */
export async function verificationProblem(
  c: PoolClient,
  teamId: string,
  certificate: { readonly verification?: CertificateVerification; readonly result?: { readonly head: string } },
): Promise<string | undefined> {
  const spec = await verifySpecOf(c, teamId);
  if (!spec) return undefined;
  const bound = certificate.verification;
  if (!bound?.verified) return `the run's verify command (${spec.command}) has not passed on this result`;
  const stored = await findVerification(c, bound.verificationId);
  if (!stored || stored.teamId !== teamId || !verificationPassed(stored) || stored.command !== spec.command || stored.resultHead !== certificate.result?.head) {
    return `verification ${bound.verificationId} is not a passing run of ${spec.command} on the certified result`;
  }
  return undefined;
}
