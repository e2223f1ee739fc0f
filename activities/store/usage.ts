import type { Pool } from 'pg';
import type { ModelResponse } from '../model/types';
import type { TurnKey } from './keys';

/**
 * Records a model call's usage (once per turn and step), with what it reserved and what it is charged: the reported
 * total, or the reservation when the model reported none. Answers whether this call stored it.
 */
export async function recordModelCall(
  pool: Pool,
  call: TurnKey & { step: number; provider: string; latencyMs: number; reserved: number },
  response: ModelResponse,
): Promise<boolean> {
  const usage = response.usage;
  const { rowCount } = await pool.query(
    `INSERT INTO model_calls (session_id, execution_id, turn_id, turn, step, provider, model, prompt_tokens,
                              completion_tokens, total_tokens, finish_reason, latency_ms, reserved_tokens, charged_tokens)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
     ON CONFLICT (turn_id, step) DO NOTHING`,
    [
      call.sessionId,
      call.executionId,
      call.turnId,
      call.turn,
      call.step,
      call.provider,
      response.model,
      usage?.promptTokens ?? null,
      usage?.completionTokens ?? null,
      usage?.totalTokens ?? null,
      response.finishReason,
      Math.round(call.latencyMs),
      call.reserved,
      usage?.totalTokens ?? call.reserved,
    ],
  );
  // False when an earlier attempt recorded this call: its usage is not counted twice.
  return rowCount === 1;
}

/** What a recorded call was charged (rows from before budgets: their reported total), if it was recorded. */
export async function recordedCharge(pool: Pool, turnId: string, step: number): Promise<{ charged: number; reserved: number; reported: boolean } | undefined> {
  const { rows } = await pool.query<{ charged: number | null; reserved: number | null; total: number | null }>(
    `SELECT charged_tokens AS charged, reserved_tokens AS reserved, total_tokens AS total FROM model_calls WHERE turn_id = $1 AND step = $2`,
    [turnId, step],
  );
  const row = rows[0];
  if (!row) return undefined;
  const charged = row.charged ?? row.total ?? 0;
  return { charged, reserved: row.reserved ?? charged, reported: row.total !== null };
}
