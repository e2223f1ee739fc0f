import type { Pool } from 'pg';
import { z } from 'zod';
import type { MemberMessageFact, TeamMembership } from '../../contract/messages';
import { excerpt } from '../../workflows/session/state';
import { currentExecution, isMemberSession, postInboxMessage, TeamStoreRefusal } from '../store/team';
import { refusal } from './run-tool';
import type { ToolOutput } from '../store/dispatch';
import type { SessionLiveness } from '../../contract/temporal-port';

/** The longest message a Member may write (the detail belongs in its worktree and its task summary). */
const MAX_MEMBER_MESSAGE_CHARS = 4000;
/** How much of the text travels in the Coordinator's wake (history); the rest is read from the Inbox. */
const WAKE_EXCERPT_CHARS = 280;

const argsSchema = z
  .object({
    // Checked by the Inbox, which answers a missing or wrong one with its own code.
    related_task_id: z.unknown().optional(),
    purpose: z.unknown().optional(),
    text: z.string().trim().min(1).max(MAX_MEMBER_MESSAGE_CHARS),
  })
  .strict();

/**
 * Runs a Member's `org_send_message` (invariant 16): as the Member actor with the execution its related task runs
 * as now (read from the board, never from the session), through the Inbox's rule. Only an accepted message comes
 * back with `message`, which the Member's session then signals to its team once; a refusal is a typed result
 * with nothing written.
 */
export async function sendMemberMessage(
  pool: Pool,
  input: { team: TeamMembership; sessionId: string; messageId: string; rawArguments: string },
  teamLiveness?: (teamId: string) => Promise<SessionLiveness>,
  /** Called with the typed code of a refusal (metrics). */
  onRefused?: (code: string) => void,
): Promise<{ output: ToolOutput; message?: MemberMessageFact & { revision: number } }> {
  const started = performance.now();
  const refused = (code: string, why: string) => {
    onRefused?.(code);
    return { output: { ...refusal(code, `${why}; nothing was sent`), durationMs: performance.now() - started } };
  };
  let json: unknown;
  try {
    json = input.rawArguments.trim() === '' ? {} : JSON.parse(input.rawArguments);
  } catch {
    return refused('tool_args_invalid', 'arguments of org_send_message are not valid JSON');
  }
  const parsed = argsSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    return refused('tool_args_invalid', `arguments of org_send_message do not match its schema: ${issues}`);
  }
  const { teamId, memberId } = input.team;
  if (!(await isMemberSession(pool, teamId, memberId, input.sessionId))) {
    return refused('tool_not_allowed', `session ${input.sessionId} is not member ${memberId} of team ${teamId}`);
  }
  // The team run must be running (a TeamRun terminated from outside leaves its Member sessions running on): nobody
  // would read the message, and its wake would go nowhere.
  const team = teamLiveness ? (await teamLiveness(teamId)).liveness : 'unknown';
  if (team !== 'alive') {
    return refused(
      'team_not_running',
      team === 'dead' ? `team ${teamId} is not running` : `team ${teamId} could not be confirmed running (Temporal did not answer)`,
    );
  }
  const args = parsed.data;
  const relatedTaskId = typeof args.related_task_id === 'string' ? args.related_task_id : undefined;
  const executionId = relatedTaskId ? await currentExecution(pool, teamId, memberId, relatedTaskId) : undefined;
  try {
    const { result } = await postInboxMessage(
      pool,
      teamId,
      // With no current execution the Inbox refuses the task before the attribution matters.
      { kind: 'member', memberId, executionId: executionId ?? 'none' },
      { messageId: input.messageId, relatedTaskId: args.related_task_id, purpose: args.purpose, text: args.text },
    );
    const purpose = args.purpose as string;
    return {
      output: {
        ok: true,
        content: `sent to your Coordinator as message ${result.messageId} (${purpose}, about task ${relatedTaskId}); it is woken to read it`,
        durationMs: performance.now() - started,
      },
      message: {
        messageId: result.messageId,
        from: memberId,
        executionId: executionId!,
        relatedTaskId: relatedTaskId!,
        purpose,
        excerpt: excerpt(args.text, WAKE_EXCERPT_CHARS),
        revision: result.revision,
      },
    };
  } catch (err) {
    if (err instanceof TeamStoreRefusal) return refused(err.code, err.message);
    throw err;
  }
}
