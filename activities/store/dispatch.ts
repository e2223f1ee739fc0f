import type { ClientBase, Pool } from 'pg';
import { withTransaction } from './db';
import type { TurnKey } from './keys';

export interface DispatchKey extends TurnKey {
  readonly step: number;
  readonly callId: string;
}

export interface ToolOutput {
  ok: boolean;
  /** What the model is shown. */
  content: string;
  exitCode?: number | null;
  stdout?: string;
  stderr?: string;
  durationMs: number;
}

export type Claim =
  /** This attempt owns the call and must run it, then settle. */
  | { kind: 'claimed' }
  /** An earlier attempt ran it to the end: return its output, run nothing. */
  | { kind: 'settled'; outputId: number; output: ToolOutput }
  /** An earlier attempt claimed it and never settled: it may or may not have taken effect. */
  | { kind: 'unknown' };

/**
 * Records the claim before the tool starts (invariant 11a). The insert commits on its own, so a crash
 * right after it leaves the claim visible to the retried attempt.
 */
export async function claimDispatch(pool: Pool, key: DispatchKey, tool: string, host: string): Promise<Claim> {
  const inserted = await pool.query(
    `INSERT INTO tool_dispatches (session_id, execution_id, turn_id, turn, step, call_id, tool, host, state)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'claimed')
     ON CONFLICT (turn_id, step, call_id) DO NOTHING`,
    [key.sessionId, key.executionId, key.turnId, key.turn, key.step, key.callId, tool, host],
  );
  if (inserted.rowCount === 1) return { kind: 'claimed' };
  const { rows } = await pool.query(
    `SELECT d.state, o.id, o.ok, o.content, o.exit_code, o.stdout, o.stderr, o.duration_ms
     FROM tool_dispatches d LEFT JOIN tool_outputs o ON o.id = d.output_id
     WHERE d.turn_id = $1 AND d.step = $2 AND d.call_id = $3`,
    [key.turnId, key.step, key.callId],
  );
  const row = rows[0];
  if (row?.state === 'settled' && row.id !== null) {
    return {
      kind: 'settled',
      outputId: Number(row.id),
      output: {
        ok: row.ok,
        content: row.content,
        exitCode: row.exit_code,
        stdout: row.stdout ?? undefined,
        stderr: row.stderr ?? undefined,
        durationMs: row.duration_ms,
      },
    };
  }
  return { kind: 'unknown' };
}

/** Stores a tool's full output (idempotent: the first write for a call stands) and returns its id. */
export async function storeOutput(db: Pool | ClientBase, key: DispatchKey, tool: string, output: ToolOutput): Promise<number> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO tool_outputs (session_id, execution_id, turn_id, turn, step, call_id, tool, ok, exit_code, stdout, stderr,
                               content, duration_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
     ON CONFLICT (turn_id, step, call_id) DO UPDATE SET turn_id = EXCLUDED.turn_id
     RETURNING id`,
    [
      key.sessionId,
      key.executionId,
      key.turnId,
      key.turn,
      key.step,
      key.callId,
      tool,
      output.ok,
      output.exitCode ?? null,
      output.stdout ?? null,
      output.stderr ?? null,
      output.content,
      Math.round(output.durationMs),
    ],
  );
  return Number(rows[0].id);
}

/**
 * Stores the output and settles the claim in one transaction; idempotent under retries. A claim that another
 * attempt already declared `unknown` stays `unknown` (the model was told so and may have acted on it): the
 * output is kept for operators, and `settled: false` tells the caller to report the outcome as unknown too.
 */
export async function settleDispatch(pool: Pool, key: DispatchKey, tool: string, output: ToolOutput): Promise<{ outputId: number; settled: boolean }> {
  return withTransaction(pool, async (client) => {
    const outputId = await storeOutput(client, key, tool, output);
    const updated = await client.query(
      `UPDATE tool_dispatches SET state = 'settled', output_id = $4, settled_at = now()
       WHERE turn_id = $1 AND step = $2 AND call_id = $3 AND state IN ('claimed', 'settled')`,
      [key.turnId, key.step, key.callId, outputId],
    );
    return { outputId, settled: updated.rowCount === 1 };
  });
}

/** Marks a claim found unsettled, so operators can see which calls have an unknown outcome and why. */
export async function markUnknown(pool: Pool, key: DispatchKey, reason: string): Promise<void> {
  await pool.query(
    `UPDATE tool_dispatches SET state = 'unknown', unknown_reason = coalesce(unknown_reason, $4)
     WHERE turn_id = $1 AND step = $2 AND call_id = $3 AND state IN ('claimed', 'unknown')`,
    [key.turnId, key.step, key.callId, reason],
  );
}
