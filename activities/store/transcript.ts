import type { Pool } from 'pg';
import type { AssistantMessage, ChatMessage, ToolCall } from '../model/types';

interface EntryRow {
  turn: number;
  step: number;
  ordinal: number;
  role: 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls: ToolCall[] | null;
  tool_call_id: string | null;
}

export interface EntryKey {
  sessionId: string;
  turn: number;
  step: number;
  ordinal: number;
}

/** Idempotent: a retried activity writes the same key again and the first write stands. */
export async function appendEntry(
  pool: Pool,
  key: EntryKey,
  message: Exclude<ChatMessage, { role: 'system' }>,
  taskId?: string,
): Promise<void> {
  await pool.query(
    `INSERT INTO transcript_entries (session_id, turn, step, ordinal, role, content, tool_calls, tool_call_id, task_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (session_id, turn, step, ordinal) DO NOTHING`,
    [
      key.sessionId,
      key.turn,
      key.step,
      key.ordinal,
      message.role,
      message.content,
      message.role === 'assistant' && message.tool_calls?.length ? JSON.stringify(message.tool_calls) : null,
      message.role === 'tool' ? message.tool_call_id : null,
      taskId ?? null,
    ],
  );
}

export async function findAssistantMessage(
  pool: Pool,
  sessionId: string,
  turn: number,
  step: number,
): Promise<AssistantMessage | undefined> {
  const { rows } = await pool.query<EntryRow>(
    `SELECT turn, step, ordinal, role, content, tool_calls, tool_call_id FROM transcript_entries
     WHERE session_id = $1 AND turn = $2 AND step = $3 AND ordinal = 0 AND role = 'assistant'`,
    [sessionId, turn, step],
  );
  return rows[0] ? (toMessage(rows[0]) as AssistantMessage) : undefined;
}

/**
 * The session's whole conversation in order. An assistant tool call without a recorded result (a turn
 * cancelled mid-step) gets a synthetic one, because providers reject a request where a tool call has
 * no answer — and the model should know that call did not complete.
 */
export async function loadConversation(pool: Pool, sessionId: string): Promise<ChatMessage[]> {
  const { rows } = await pool.query<EntryRow>(
    `SELECT turn, step, ordinal, role, content, tool_calls, tool_call_id FROM transcript_entries
     WHERE session_id = $1 ORDER BY turn, step, ordinal`,
    [sessionId],
  );
  const messages: ChatMessage[] = [];
  let pending: ToolCall[] = [];
  const flushPending = () => {
    for (const call of pending) {
      messages.push({
        role: 'tool',
        tool_call_id: call.id,
        content: 'not executed: the turn ended before this tool call ran',
      });
    }
    pending = [];
  };
  for (const row of rows) {
    const message = toMessage(row);
    if (message.role === 'tool') {
      pending = pending.filter((call) => call.id !== message.tool_call_id);
    } else {
      flushPending();
    }
    messages.push(message);
    if (message.role === 'assistant' && message.tool_calls) pending = [...message.tool_calls];
  }
  flushPending();
  return messages;
}

function toMessage(row: EntryRow): Exclude<ChatMessage, { role: 'system' }> {
  switch (row.role) {
    case 'user':
      return { role: 'user', content: row.content ?? '' };
    case 'tool':
      return { role: 'tool', content: row.content ?? '', tool_call_id: row.tool_call_id ?? '' };
    case 'assistant':
      return row.tool_calls?.length
        ? { role: 'assistant', content: row.content, tool_calls: row.tool_calls }
        : { role: 'assistant', content: row.content };
  }
}
