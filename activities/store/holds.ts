import type { Pool } from 'pg';

/**
 * Verification holds (migration 012): a worktree where an isolated child's command changed what it must not runs
 * no further command until a user resolves the hold (docs/confinement.md, layer 3).
 */
export interface VerificationHold {
  readonly holdId: string;
  /** The lease key, `<host>:<path>`. */
  readonly worktree: string;
  readonly sessionId: string;
  readonly command: string;
  /** What changed (verify.ts ProtectedChange[]), as recorded. */
  readonly changes: unknown;
  readonly heldAt: string;
  readonly resolvedAt?: string;
  readonly resolvedBy?: string;
  readonly note?: string;
}

interface Row {
  hold_id: string;
  worktree: string;
  session_id: string;
  command: string;
  changes: unknown;
  held_at: Date;
  resolved_at: Date | null;
  resolved_by: string | null;
  note: string | null;
}

function toHold(r: Row): VerificationHold {
  return {
    holdId: String(r.hold_id),
    worktree: r.worktree,
    sessionId: r.session_id,
    command: r.command,
    changes: r.changes,
    heldAt: r.held_at.toISOString(),
    ...(r.resolved_at ? { resolvedAt: r.resolved_at.toISOString() } : {}),
    ...(r.resolved_by ? { resolvedBy: r.resolved_by } : {}),
    ...(r.note ? { note: r.note } : {}),
  };
}

/** The worktree's open hold, if any. */
export async function openHold(pool: Pool, worktree: string): Promise<VerificationHold | undefined> {
  const { rows } = await pool.query<Row>('SELECT * FROM verification_holds WHERE worktree = $1 AND resolved_at IS NULL', [worktree]);
  return rows[0] && toHold(rows[0]);
}

/** Holds the worktree; when a hold is already open it stays as it was (the first change found is the one shown). */
export async function holdWorktree(pool: Pool, input: { worktree: string; sessionId: string; command: string; changes: unknown }): Promise<VerificationHold> {
  await pool.query(
    `INSERT INTO verification_holds (worktree, session_id, command, changes) VALUES ($1, $2, $3, $4::jsonb)
     ON CONFLICT (worktree) WHERE resolved_at IS NULL DO NOTHING`,
    [input.worktree, input.sessionId, input.command, JSON.stringify(input.changes)],
  );
  const hold = await openHold(pool, input.worktree);
  if (!hold) throw new Error(`verification hold on ${input.worktree} was not recorded`);
  return hold;
}

/** Resolves the open hold of a session's worktree (a user's decision); undefined when none is open. */
export async function resolveHold(pool: Pool, input: { worktree: string; by: string; note?: string }): Promise<VerificationHold | undefined> {
  const { rows } = await pool.query<Row>(
    `UPDATE verification_holds SET resolved_at = now(), resolved_by = $2, note = $3
     WHERE worktree = $1 AND resolved_at IS NULL RETURNING *`,
    [input.worktree, input.by, input.note ?? null],
  );
  return rows[0] && toHold(rows[0]);
}
