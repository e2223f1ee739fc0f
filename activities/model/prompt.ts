export interface SessionContext {
  title: string;
  agent: string;
  worktree: string;
  branch: string;
  /** Earlier turns left out of the request by the context budget. */
  omittedTurns?: number;
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
