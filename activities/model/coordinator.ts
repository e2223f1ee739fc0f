import type { ChatMessage, ModelRequest } from './types';

/**
 * The scripted Coordinator (a scenario's `coordinator`, scenarios/FORMAT.md): it plays a team's Coordinator from
 * what the request itself carries — the member rows in the system message, the last user message (the goal, a
 * user message or the events that woke it) and the tool results since — the same bytes a real model gets. It
 * keeps no state and never reads the board or the workflow, so it completes the run only when the wake message
 * says the candidate is ready, and starts a dependent task only when a wake says its dependency completed.
 */

interface PlannedTask {
  readonly taskId: string;
  readonly title: string;
  readonly description: string;
  readonly owner: string;
  /** Created unassigned with the plan; assigned to `owner` on the wake that reports this task completed. */
  readonly after?: string;
}

export interface CoordinatorScript {
  readonly tasks: readonly PlannedTask[];
  /** The `summary` of the `org_run_complete` call. */
  readonly completion: string;
  /** The final text after a certificate was issued; `{{certificate}}` is its id. */
  readonly summary: string;
  /** The final text after any other tool results; `{{result}}` is the first line of the last one. */
  readonly reply: string;
  /** The answer to a wake that asks for nothing (no tool call: the team wakes it on the next fact). */
  readonly waiting: string;
  /** Phrases of a user message that asks to complete the run (case-insensitive): `org_run_complete`, ready or not. */
  readonly completeOn?: readonly string[];
  /** The fix it creates (once, with its owner) when `org_run_complete` is refused `verification_failed`. */
  readonly onVerificationFailed?: Omit<PlannedTask, 'after'>;
}

export type CoordinatorDecision =
  | { readonly kind: 'calls'; readonly calls: readonly { readonly name: string; readonly arguments: Record<string, unknown> }[] }
  | { readonly kind: 'text'; readonly content: string };

/** The line a wake message carries when the closure validator found the board ready (workflows/team/workflow.ts). */
const READY_MARKER = 'completion_candidate.state is ready';
const MEMBERS_HEADER = 'member | role | session';
const CERTIFICATE = /^delivered: certificate (\S+)/m;
const VERIFICATION_FAILED = /^error \(verification_failed\)/;

/** Whether an assistant message of `messages` already called task_create for `taskId` (the fix is created once). */
function created(messages: readonly ChatMessage[], taskId: string): boolean {
  return messages.some((m) =>
    (m.role === 'assistant' ? (m.tool_calls ?? []) : []).some((c) => {
      if (c.function.name !== 'task_create') return false;
      try {
        return (JSON.parse(c.function.arguments) as { taskId?: unknown }).taskId === taskId;
      } catch {
        return false;
      }
    }),
  );
}

/** `member → session` from the rows under the `member | role | session` header of the system message. */
function memberSessionsOf(messages: readonly ChatMessage[]): Map<string, string> {
  const system = messages.find((m) => m.role === 'system')?.content ?? '';
  const lines = system.split('\n');
  const header = lines.findIndex((line) => line.trim() === MEMBERS_HEADER);
  const sessions = new Map<string, string>();
  if (header < 0) return sessions;
  for (const line of lines.slice(header + 1)) {
    const cells = line.split(' | ').map((c) => c.trim());
    if (cells.length !== 3) break;
    sessions.set(cells[0], cells[2]);
  }
  return sessions;
}

/** Thrown when a planned description names a member the request's system message does not list. */
export class UnknownMemberError extends Error {}

/** `{{session:<member>}}` → that member's session id, as the request lists it. */
function fillSessions(text: string, sessions: Map<string, string>): string {
  return text.replace(/\{\{session:([a-z][a-z0-9-]*)\}\}/g, (_, member: string) => {
    const session = sessions.get(member);
    if (!session)
      throw new UnknownMemberError(`{{session:${member}}}: the request lists no member ${member} (members: ${[...sessions.keys()].join(', ') || 'none'})`);
    return session;
  });
}

/** Whether the wake text reports `taskId` completed (a `- task <id> completed by <member>` event line). */
function reportsCompleted(text: string, taskId: string): boolean {
  const id = taskId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^- task ${id} completed\\b`, 'm').test(text);
}

/**
 * The decision for one Coordinator request:
 * 1. the last message is a tool result: end the turn — the summary citing the certificate when one was issued
 *    since the user message, else `reply` — unless it is a `verification_failed` refusal and the script has a fix
 *    it has not created yet: `task_create` that fix (with its owner);
 * 2. the first user message (the goal): create every planned task (owners for those without `after`), approve;
 * 3. a wake that says the candidate is ready, or a message with one of the `completeOn` phrases:
 *    `org_run_complete` first thing;
 * 4. a wake that reports a task completed: assign the tasks planned after it to their owners;
 * 5. anything else: `waiting`, no tool call.
 */
export function coordinateRequest(script: CoordinatorScript, request: Pick<ModelRequest, 'messages'>): CoordinatorDecision {
  const messages = request.messages;
  const last = messages[messages.length - 1];
  const lastUser = messages.map((m) => m.role).lastIndexOf('user');
  if (!last || lastUser < 0) return { kind: 'text', content: script.waiting };
  if (last.role === 'tool') {
    const results = messages.slice(lastUser + 1).filter((m) => m.role === 'tool');
    const certificate = results.map((m) => CERTIFICATE.exec(m.content ?? '')?.[1]).find(Boolean);
    if (certificate) return { kind: 'text', content: script.summary.replaceAll('{{certificate}}', certificate) };
    const fix = script.onVerificationFailed;
    if (fix && VERIFICATION_FAILED.test(last.content ?? '') && !created(messages, fix.taskId)) {
      const description = fillSessions(fix.description, memberSessionsOf(messages));
      return { kind: 'calls', calls: [{ name: 'task_create', arguments: { taskId: fix.taskId, title: fix.title, description, owner: fix.owner } }] };
    }
    const result = (last.content ?? '').split('\n')[0].trim();
    return { kind: 'text', content: script.reply.replaceAll('{{result}}', result) };
  }
  if (last.role !== 'user') return { kind: 'text', content: script.waiting };
  const text = last.content ?? '';
  const isGoal = messages.filter((m) => m.role === 'user').length === 1;
  if (isGoal) {
    const sessions = memberSessionsOf(messages);
    return {
      kind: 'calls',
      calls: [
        ...script.tasks.map((task) => ({
          name: 'task_create',
          arguments: {
            taskId: task.taskId,
            title: task.title,
            description: fillSessions(task.description, sessions),
            ...(task.after === undefined ? { owner: task.owner } : {}),
          },
        })),
        { name: 'plan_approve', arguments: {} },
      ],
    };
  }
  const asked = (script.completeOn ?? []).some((phrase) => text.toLowerCase().includes(phrase.toLowerCase()));
  if (text.includes(READY_MARKER) || asked) return { kind: 'calls', calls: [{ name: 'org_run_complete', arguments: { summary: script.completion } }] };
  const due = script.tasks.filter((task) => task.after !== undefined && reportsCompleted(text, task.after));
  if (due.length > 0) return { kind: 'calls', calls: due.map((task) => ({ name: 'task_assign', arguments: { taskId: task.taskId, owner: task.owner } })) };
  return { kind: 'text', content: script.waiting };
}

/** Problems of a coordinator script that would make it plan wrongly by construction (checked when a scenario loads). */
export function coordinatorProblems(script: Pick<CoordinatorScript, 'tasks'>): { path: (string | number)[]; message: string }[] {
  const problems: { path: (string | number)[]; message: string }[] = [];
  const ids = script.tasks.map((t) => t.taskId);
  script.tasks.forEach((task, i) => {
    if (ids.indexOf(task.taskId) !== i) problems.push({ path: ['tasks', i, 'taskId'], message: `"${task.taskId}" is listed twice` });
    if (task.after !== undefined && (task.after === task.taskId || !ids.includes(task.after))) {
      problems.push({ path: ['tasks', i, 'after'], message: `"${task.after}" is not another planned task` });
    }
  });
  if (script.tasks.every((t) => t.after !== undefined)) problems.push({ path: ['tasks'], message: 'at least one task must start with the plan (no `after`)' });
  return problems;
}
