import type { Pool } from 'pg';
import type { AssistantMessage, ChatMessage, ToolCall } from '../model/types';
import type { TurnKey } from './keys';
import { startingConversation } from './starting-context';
import { turnCache } from './turn-cache';

interface EntryRow {
  turn_id: string;
  turn: number;
  step: number;
  ordinal: number;
  role: 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls: ToolCall[] | null;
  tool_call_id: string | null;
}

export interface EntryKey extends TurnKey {
  /** 0 for the task (the user message that opens the turn), 1.. for model calls. */
  readonly step: number;
  /** 0: the user message (step 0) or the assistant message of a step; 1..: tool results in call order. */
  readonly ordinal: number;
}

/** What the model is told about a tool call whose claim exists but has no recorded result. */
export const UNKNOWN_OUTCOME =
  'outcome unknown: an earlier attempt started this tool call and did not record a result (the worker stopped). ' +
  'It may or may not have taken effect; check the state of the worktree before repeating it.';

/** What the model is told about a tool call that was never claimed (the turn ended before it ran). */
export const NOT_EXECUTED = 'not executed: the turn ended before this tool call ran';

/**
 * Idempotent: a retried activity writes the same key again and the first write stands. `taskId`: the task a turn's
 * user message is the text of. `laterContent`: what turns after this one are shown instead of the content (the
 * orchestrator's results without their roster: workflows/orchestrator/echo.ts laterView).
 */
export async function appendEntry(
  pool: Pool,
  key: EntryKey,
  message: Exclude<ChatMessage, { role: 'system' }>,
  { taskId, laterContent }: { taskId?: string; laterContent?: string } = {},
): Promise<void> {
  const toolCalls = message.role === 'assistant' && message.tool_calls?.length ? JSON.stringify(message.tool_calls) : null;
  await pool.query(
    `INSERT INTO transcript_entries (session_id, execution_id, turn_id, turn, step, ordinal, role, content, tool_calls,
                                     tool_call_id, task_id, chars, later_content)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
     ON CONFLICT (turn_id, step, ordinal) DO NOTHING`,
    [
      key.sessionId,
      key.executionId,
      key.turnId,
      key.turn,
      key.step,
      key.ordinal,
      message.role,
      message.content,
      toolCalls,
      message.role === 'tool' ? message.tool_call_id : null,
      taskId ?? null,
      (message.content?.length ?? 0) + (toolCalls?.length ?? 0),
      laterContent ?? null,
    ],
  );
}

export async function findAssistantMessage(pool: Pool, turnId: string, step: number): Promise<AssistantMessage | undefined> {
  const { rows } = await pool.query<EntryRow>(
    `SELECT turn_id, turn, step, ordinal, role, content, tool_calls, tool_call_id FROM transcript_entries
     WHERE turn_id = $1 AND step = $2 AND ordinal = 0 AND role = 'assistant'`,
    [turnId, step],
  );
  return rows[0] ? (toMessage(rows[0]) as AssistantMessage) : undefined;
}

/** The content of a tool call's recorded result, if the transcript has one. */
export async function findToolResult(pool: Pool, turnId: string, step: number, callId: string): Promise<string | undefined> {
  const { rows } = await pool.query<{ content: string | null }>(
    `SELECT content FROM transcript_entries WHERE turn_id = $1 AND step = $2 AND role = 'tool' AND tool_call_id = $3`,
    [turnId, step, callId],
  );
  return rows[0] ? (rows[0].content ?? '') : undefined;
}

export interface Conversation {
  messages: ChatMessage[];
  /** Earlier turns left out to keep the request within the context budget. */
  omittedTurns: number;
  /** The leading messages that are the conversation the chain started from (starting-context.ts). */
  startingMessages: number;
}

/**
 * The conversation a model call of `key`'s turn sees: the conversation its chain started from (starting-context.ts),
 * then every earlier turn of the same execution chain (for a
 * turn number that a reset ran twice, the newest attempt) and the current attempt of this turn, in order.
 * Older turns are left out whole when the total would pass `contextChars` (the current turn always stays). An earlier
 * turn's entry is shown, and counted, as later turns see it (appendEntry's `laterContent`, when it has one).
 *
 * An assistant tool call without a recorded result gets a synthetic one, because providers reject a request
 * where a tool call has no answer — and it says truthfully what is known: `unknown` when the call was claimed
 * (it may have run), `not executed` only when it never was.
 */
export async function loadConversation(pool: Pool, key: TurnKey, contextChars = Number.MAX_SAFE_INTEGER): Promise<Conversation> {
  // `stamp`: what the turn's rows are now (its newest seq and their count), to tell a cached copy is still them.
  const { rows: turns } = await pool.query<{ turn_id: string; chars: string; stamp: string }>(
    `WITH attempts AS (
       SELECT turn, turn_id, min(seq) AS first_seq, sum(coalesce(length(later_content), chars)) AS chars,
              max(seq) || '/' || count(*) AS stamp FROM transcript_entries
       WHERE execution_id = $1 AND turn < $2
       GROUP BY turn, turn_id
     )
     SELECT DISTINCT ON (turn) turn, turn_id, chars, stamp FROM attempts ORDER BY turn DESC, first_seq DESC`,
    [key.executionId, key.turn],
  );
  const { rows: current } = await pool.query<{ chars: string }>(`SELECT coalesce(sum(chars), 0) AS chars FROM transcript_entries WHERE turn_id = $1`, [
    key.turnId,
  ]);
  let budget = contextChars - Number(current[0]?.chars ?? 0);
  const earlier: { turn_id: string; stamp: string }[] = [];
  let omittedTurns = 0;
  for (const turn of turns) {
    const chars = Number(turn.chars);
    if (omittedTurns === 0 && chars <= budget) {
      budget -= chars;
      earlier.unshift(turn);
    } else {
      omittedTurns += 1;
    }
  }
  // The conversation the chain started from (a handoff, or its parent's conversation) is older than any of its turns:
  // its parts are kept newest first while they fit after those, like turns.
  const starting = await startingConversation(pool, key.executionId);
  const inherited: ChatMessage[][] = [];
  for (const part of starting.reverse()) {
    if (omittedTurns === 0 && part.chars <= budget) {
      budget -= part.chars;
      inherited.unshift(part.messages);
    } else {
      omittedTurns += 1;
    }
  }
  // Earlier turns the worker already has as they were are not read again (turn-cache.ts); the current one always is.
  const cached = new Map(earlier.map((t) => [t.turn_id, turnCache.get(t.turn_id, t.stamp)]));
  const read = [key.turnId, ...earlier.filter((t) => !cached.get(t.turn_id)).map((t) => t.turn_id)];
  // Earlier turns are shown as later turns see them (appendEntry's laterContent), the current one as it is.
  const { rows } = await pool.query<EntryRow>(
    `SELECT turn_id, turn, step, ordinal, role, CASE WHEN turn_id = $2 THEN content ELSE coalesce(later_content, content) END AS content,
            tool_calls, tool_call_id FROM transcript_entries
     WHERE turn_id = ANY($1) ORDER BY turn, step, ordinal`,
    [read, key.turnId],
  );
  const rowsOf = new Map<string, EntryRow[]>(read.map((id) => [id, []]));
  for (const row of rows) rowsOf.get(row.turn_id)!.push(row);
  const messages: ChatMessage[] = [...inherited.flat()];
  for (const turn of earlier) {
    let shown = cached.get(turn.turn_id);
    if (!shown) {
      const built = await withSyntheticResults(pool, rowsOf.get(turn.turn_id)!);
      shown = built.messages;
      if (!built.synthetic) turnCache.set(turn.turn_id, turn.stamp, shown);
    }
    messages.push(...shown);
  }
  messages.push(...(await withSyntheticResults(pool, rowsOf.get(key.turnId)!)).messages);
  return { messages, omittedTurns, startingMessages: inherited.flat().length };
}

/**
 * One turn's rows in order, with a result for every tool call that has none (see loadConversation); `synthetic` when
 * there was such a call.
 */
async function withSyntheticResults(pool: Pool, rows: EntryRow[]): Promise<{ messages: ChatMessage[]; synthetic: boolean }> {
  const answered = new Set(rows.filter((r) => r.role === 'tool').map((r) => `${r.turn_id}/${r.step}/${r.tool_call_id}`));
  const missing = rows.flatMap((r) =>
    r.role === 'assistant' && r.tool_calls?.length
      ? r.tool_calls.filter((c) => !answered.has(`${r.turn_id}/${r.step}/${c.id}`)).map((c) => ({ row: r, call: c }))
      : [],
  );
  const claimed = new Set<string>();
  if (missing.length > 0) {
    const { rows: claims } = await pool.query<{ turn_id: string; step: number; call_id: string }>(
      `SELECT turn_id, step, call_id FROM tool_dispatches WHERE turn_id = ANY($1)`,
      [[...new Set(missing.map((m) => m.row.turn_id))]],
    );
    for (const c of claims) claimed.add(`${c.turn_id}/${c.step}/${c.call_id}`);
  }
  const messages: ChatMessage[] = [];
  let pending: { row: EntryRow; call: ToolCall }[] = [];
  const flushPending = () => {
    for (const { row, call } of pending) {
      const wasClaimed = claimed.has(`${row.turn_id}/${row.step}/${call.id}`);
      messages.push({ role: 'tool', tool_call_id: call.id, content: wasClaimed ? UNKNOWN_OUTCOME : NOT_EXECUTED });
    }
    pending = [];
  };
  for (const row of rows) {
    const message = toMessage(row);
    if (message.role === 'tool') {
      pending = pending.filter(({ call }) => call.id !== message.tool_call_id);
    } else {
      flushPending();
    }
    messages.push(message);
    if (message.role === 'assistant' && message.tool_calls) pending = message.tool_calls.map((call) => ({ row, call }));
  }
  flushPending();
  return { messages, synthetic: missing.length > 0 };
}

function toMessage(row: EntryRow): Exclude<ChatMessage, { role: 'system' }> {
  switch (row.role) {
    case 'user':
      return { role: 'user', content: row.content ?? '' };
    case 'tool':
      return { role: 'tool', content: row.content ?? '', tool_call_id: row.tool_call_id ?? '' };
    case 'assistant':
      return row.tool_calls?.length ? { role: 'assistant', content: row.content, tool_calls: row.tool_calls } : { role: 'assistant', content: row.content };
  }
}

/** One entry of a session's transcript as `orchard session log` shows it. */
export interface TranscriptEntry {
  readonly turn: number;
  readonly turnId: string;
  readonly step: number;
  readonly role: 'user' | 'assistant' | 'tool';
  readonly content: string | null;
  readonly toolCalls?: readonly { readonly id: string; readonly name: string; readonly arguments: string }[];
  readonly toolCallId?: string;
  readonly taskId?: string;
  readonly at: string;
  /** The entry's position in the store: `afterSeq` reads only newer ones (`session watch` follows with it). */
  readonly seq: number;
}

/**
 * A session's transcript, turn by turn: the task that opened each turn, every model answer with its tool calls, and
 * every tool result the model was shown — for the newest attempt of each turn of `executionId`'s chain, oldest first.
 */
export async function readTranscript(pool: Pool, executionId: string, options: { afterSeq?: number; turn?: number } = {}): Promise<TranscriptEntry[]> {
  const { rows } = await pool.query<EntryRow & { seq: string; task_id: string | null; created_at: Date }>(
    `WITH attempts AS (
       SELECT DISTINCT ON (turn) turn_id FROM transcript_entries WHERE execution_id = $1
       GROUP BY turn, turn_id ORDER BY turn, min(seq) DESC
     )
     SELECT seq, turn_id, turn, step, ordinal, role, content, tool_calls, tool_call_id, task_id, created_at FROM transcript_entries
     WHERE turn_id IN (SELECT turn_id FROM attempts) AND seq > $2 AND ($3::int IS NULL OR turn = $3)
     ORDER BY turn, step, ordinal`,
    [executionId, options.afterSeq ?? 0, options.turn ?? null],
  );
  return rows.map((r) => ({
    turn: r.turn,
    turnId: r.turn_id,
    step: r.step,
    role: r.role,
    content: r.content,
    ...(r.tool_calls?.length ? { toolCalls: r.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) } : {}),
    ...(r.tool_call_id ? { toolCallId: r.tool_call_id } : {}),
    ...(r.task_id ? { taskId: r.task_id } : {}),
    at: r.created_at.toISOString(),
    seq: Number(r.seq),
  }));
}
