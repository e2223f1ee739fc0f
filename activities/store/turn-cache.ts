import type { ChatMessage } from '../model/types';

/**
 * Earlier turns' messages as a model request shows them, kept in the worker between model calls (issue 23): a
 * session's conversation only grows, so each call re-read and re-parsed every earlier turn, which for an
 * orchestrator near its context budget is hundreds of kilobytes a step. An entry is used only while its turn's rows
 * in the store are the ones it was built from (the turn's newest `seq` and its row count: a row added later, say by a
 * late retry, makes it stale), so a worker that shares the store with others never shows an old turn. Turns that
 * needed synthetic tool results are not kept (a claim written later changes what they say).
 *
 * Bounded by characters; the least recently used turns go first.
 */
class TurnCache {
  private readonly entries = new Map<string, { readonly stamp: string; readonly messages: readonly ChatMessage[]; readonly chars: number }>();
  private chars = 0;

  constructor(private readonly maxChars: number) {}

  get(turnId: string, stamp: string): readonly ChatMessage[] | undefined {
    const entry = this.entries.get(turnId);
    if (!entry || entry.stamp !== stamp) return undefined;
    // Most recently used last.
    this.entries.delete(turnId);
    this.entries.set(turnId, entry);
    return entry.messages;
  }

  set(turnId: string, stamp: string, messages: readonly ChatMessage[]): void {
    const chars = messages.reduce((n, m) => n + (m.content?.length ?? 0) + ('tool_calls' in m ? JSON.stringify(m.tool_calls ?? []).length : 0), 0);
    this.drop(turnId);
    if (chars > this.maxChars) return;
    this.entries.set(turnId, { stamp, messages, chars });
    this.chars += chars;
    for (const [oldest] of this.entries) {
      if (this.chars <= this.maxChars) break;
      this.drop(oldest);
    }
  }

  private drop(turnId: string): void {
    const entry = this.entries.get(turnId);
    if (!entry) return;
    this.entries.delete(turnId);
    this.chars -= entry.chars;
  }
}

/** The worker's: 32 M characters, the context budget (400,000 by default) of about eighty busy sessions. */
export const turnCache = new TurnCache(32 * 1024 * 1024);
