import type { Pool } from 'pg';
import type { ModelResponse } from '../model/types';
import type { TurnKey } from './keys';

export async function recordModelCall(
  pool: Pool,
  call: TurnKey & { step: number; provider: string; latencyMs: number },
  response: ModelResponse,
): Promise<void> {
  await pool.query(
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
}

export interface UsageTotals {
  calls: number;
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
}

export async function sessionUsage(pool: Pool, sessionId: string): Promise<UsageTotals> {
  const { rows } = await pool.query(
    `SELECT count(*)::int AS calls, coalesce(sum(prompt_tokens), 0)::int AS prompt,
            coalesce(sum(completion_tokens), 0)::int AS completion, coalesce(sum(total_tokens), 0)::int AS total
     FROM model_calls WHERE session_id = $1`,
    [sessionId],
  );
  const r = rows[0];
  return { calls: r.calls, promptTokens: r.prompt, completionTokens: r.completion, totalTokens: r.total };
}
