import type { Pool } from 'pg';
import type { StartingContextInput } from '../../contract/activities';
import { orchardFailure } from '../../contract/failures';
import type { ConversationBound } from '../../contract/messages';
import { stripScaffolding } from '../../workflows/orchestrator/echo';
import type { ChatMessage } from '../model/types';

/**
 * Where a session's execution chain starts its conversation (docs/sessions.md#starting-context): an explicit handoff,
 * or its parent orchestrator's conversation by reference. The parent's transcript rows are append-only, so a bound
 * read later reads what the orchestrator had when it made the call; nothing of it is copied, here or into history.
 */
/**
 * Idempotent (one row per chain: a retry keeps the first). A bound the parent's transcript does not have is refused
 * (`invalid_input`): the child would otherwise start from nothing while it was promised a conversation.
 */
export async function storeStartingContext(pool: Pool, row: StartingContextInput): Promise<void> {
  const b = row.parentConversation;
  if (b && (await boundSeq(pool, b)) === undefined) {
    throw orchardFailure(
      'invalid_input',
      `orchestrator ${b.orchestratorId} has no model answer at turn ${b.turn}, step ${b.step} (${b.turnId}): there is no conversation to include`,
    );
  }
  await pool.query(
    `INSERT INTO session_starting_context (execution_id, session_id, request_id, handoff, parent_session_id, parent_execution_id,
                                           parent_turn_id, parent_turn, parent_step)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (execution_id) DO NOTHING`,
    [
      row.executionId,
      row.sessionId,
      row.requestId,
      row.handoff ?? null,
      b?.orchestratorId ?? null,
      b?.executionId ?? null,
      b?.turnId ?? null,
      b?.turn ?? null,
      b?.step ?? null,
    ],
  );
}

async function boundSeq(pool: Pool, b: ConversationBound): Promise<string | undefined> {
  const { rows } = await pool.query<{ seq: string }>(
    `SELECT seq FROM transcript_entries
     WHERE turn_id = $1 AND step = $2 AND ordinal = 0 AND role = 'assistant' AND session_id = $3 AND execution_id = $4`,
    [b.turnId, b.step, b.orchestratorId, b.executionId],
  );
  return rows[0]?.seq;
}

/** A part of the starting conversation that is kept or left out whole (one parent turn, or the handoff). */
export interface StartingPart {
  readonly messages: ChatMessage[];
  readonly chars: number;
}

/**
 * The conversation `executionId`'s chain starts from, oldest part first; none for a chain started independent.
 *
 * The parent's conversation is rendered as its user messages (the users' words and the manifests of child results)
 * and its assistant text, scaffolding stripped: not its system prompt, roster or tool definitions, and not its tool
 * calls and results — those belong to the orchestrator's role and tools, which the child does not have. Each parent
 * turn is its newest attempt as of the bound; entries written after the bound (the rest of that turn, later turns)
 * are not part of it.
 */
export async function startingConversation(pool: Pool, executionId: string): Promise<StartingPart[]> {
  const { rows } = await pool.query<{
    handoff: string | null;
    parent_session_id: string | null;
    parent_execution_id: string | null;
    parent_turn_id: string | null;
    parent_turn: number | null;
    parent_step: number | null;
  }>(`SELECT handoff, parent_session_id, parent_execution_id, parent_turn_id, parent_turn, parent_step FROM session_starting_context WHERE execution_id = $1`, [
    executionId,
  ]);
  const row = rows[0];
  if (!row) return [];
  if (row.handoff !== null) return [{ messages: [{ role: 'user', content: row.handoff }], chars: row.handoff.length }];
  const bound: ConversationBound = {
    orchestratorId: row.parent_session_id!,
    executionId: row.parent_execution_id!,
    turnId: row.parent_turn_id!,
    turn: row.parent_turn!,
    step: row.parent_step!,
  };
  const seq = await boundSeq(pool, bound);
  if (seq === undefined) return [];
  const { rows: entries } = await pool.query<{ turn: number; role: 'user' | 'assistant'; content: string }>(
    `WITH attempts AS (
       SELECT turn, turn_id, min(seq) AS first_seq FROM transcript_entries
       WHERE execution_id = $1 AND session_id = $2 AND seq <= $3
       GROUP BY turn, turn_id
     ), newest AS (
       SELECT DISTINCT ON (turn) turn_id FROM attempts ORDER BY turn, first_seq DESC
     )
     SELECT turn, role, content FROM transcript_entries
     WHERE turn_id IN (SELECT turn_id FROM newest) AND seq <= $3 AND role IN ('user', 'assistant') AND content IS NOT NULL
     ORDER BY turn, step, ordinal`,
    [bound.executionId, bound.orchestratorId, seq],
  );
  const parts = new Map<number, StartingPart>();
  for (const e of entries) {
    const content = e.role === 'assistant' ? stripScaffolding(e.content) : e.content;
    if (content.trim() === '') continue;
    const part = parts.get(e.turn) ?? { messages: [], chars: 0 };
    part.messages.push(e.role === 'user' ? { role: 'user', content } : { role: 'assistant', content });
    parts.set(e.turn, { messages: part.messages, chars: part.chars + content.length });
  }
  return [...parts.values()];
}
