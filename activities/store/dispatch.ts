import type { Pool } from 'pg';
import { withTransaction } from './db';

export interface DispatchKey {
  sessionId: string;
  turn: number;
  step: number;
  callId: string;
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
    `INSERT INTO tool_dispatches (session_id, turn, step, call_id, tool, host, state)
     VALUES ($1, $2, $3, $4, $5, $6, 'claimed')
     ON CONFLICT (session_id, turn, step, call_id) DO NOTHING`,
    [key.sessionId, key.turn, key.step, key.callId, tool, host],
  );
  if (inserted.rowCount === 1) return { kind: 'claimed' };
  const { rows } = await pool.query(
    `SELECT d.state, o.id, o.ok, o.content, o.exit_code, o.stdout, o.stderr, o.duration_ms
     FROM tool_dispatches d LEFT JOIN tool_outputs o ON o.id = d.output_id
     WHERE d.session_id = $1 AND d.turn = $2 AND d.step = $3 AND d.call_id = $4`,
    [key.sessionId, key.turn, key.step, key.callId],
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

/** Stores the output and marks the claim settled in one transaction; idempotent under retries. */
export async function settleDispatch(pool: Pool, key: DispatchKey, tool: string, output: ToolOutput): Promise<number> {
  return withTransaction(pool, async (client) => {
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO tool_outputs (session_id, turn, step, call_id, tool, ok, exit_code, stdout, stderr, content, duration_ms)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
       ON CONFLICT (session_id, turn, step, call_id) DO UPDATE SET session_id = EXCLUDED.session_id
       RETURNING id`,
      [
        key.sessionId,
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
    const outputId = Number(rows[0].id);
    await client.query(
      `UPDATE tool_dispatches SET state = 'settled', output_id = $5, settled_at = now()
       WHERE session_id = $1 AND turn = $2 AND step = $3 AND call_id = $4`,
      [key.sessionId, key.turn, key.step, key.callId, outputId],
    );
    return outputId;
  });
}

/** Marks a claim found unsettled by a retry, so operators can see which calls have an unknown outcome. */
export async function markUnknown(pool: Pool, key: DispatchKey): Promise<void> {
  await pool.query(
    `UPDATE tool_dispatches SET state = 'unknown' WHERE session_id = $1 AND turn = $2 AND step = $3 AND call_id = $4
       AND state = 'claimed'`,
    [key.sessionId, key.turn, key.step, key.callId],
  );
}
