import type { Pool } from 'pg';
import type { ModelResponse } from '../model/types';
import type { TurnKey } from './keys';

/** Records a model call's usage (once per turn and step); answers whether this call stored it. */
export async function recordModelCall(
  pool: Pool,
  call: TurnKey & { step: number; provider: string; latencyMs: number },
  response: ModelResponse,
): Promise<boolean> {
  const { rowCount } = await pool.query(
    `INSERT INTO model_calls (session_id, execution_id, turn_id, turn, step, provider, model, prompt_tokens,
                              completion_tokens, total_tokens, finish_reason, latency_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (turn_id, step) DO NOTHING`,
    [
      call.sessionId,
      call.executionId,
      call.turnId,
      call.turn,
      call.step,
      call.provider,
      response.model,
      response.usage.promptTokens,
      response.usage.completionTokens,
      response.usage.totalTokens,
      response.finishReason,
      Math.round(call.latencyMs),
    ],
  );
  // False when an earlier attempt recorded this call: its usage is not counted twice.
  return rowCount === 1;
}
