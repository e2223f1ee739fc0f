export interface SessionContext {
  title: string;
  agent: string;
  worktree: string;
  branch: string;
  /** Earlier turns left out of the request by the context budget. */
  omittedTurns?: number;
  /** An orchestrator's roster (workflows/orchestrator/roster.ts), rebuilt for every request. */
  roster?: string;
}

/** The system message of an orchestrator: it routes, it never works itself; its roster comes with every request. */
export function orchestratorPrompt(context: SessionContext): string {
  return [
    `You are the orchestrator of a fleet of coding agents working on: ${context.title}.`,
    'You do not write code or run commands yourself. For each request, find the child session that owns its topic ' +
      'and relay the work to it with the session tool (operation "send"). Create a child (operation "create", with ' +
      'a topic) only when no child owns the topic. Answer the user briefly with what you routed where.',
    ...(context.omittedTurns ? [`The ${context.omittedTurns} oldest turn(s) are not shown (context budget).`] : []),
    '',
    context.roster ?? '',
  ].join('\n');
}

/** The system message of a child session: who it is and where it works. Rebuilt on every call. */
export function systemPrompt(context: SessionContext): string {
  return [
    `You are ${context.agent}, a coding agent working on: ${context.title}.`,
    `Your workspace is the git worktree ${context.worktree}, on branch ${context.branch}.`,
    'Use the tools to inspect and change files, run commands and commit your work on your branch.',
    'When the task is done, reply with a short summary of what you changed and stop calling tools.',
    ...(context.omittedTurns
      ? [`The ${context.omittedTurns} oldest turn(s) of this session are not shown (context budget); the worktree has their work.`]
      : []),
  ].join('\n');
}
