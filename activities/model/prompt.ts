export interface SessionContext {
  title: string;
  agent: string;
  worktree: string;
  branch: string;
}

/** The system message of a child session: who it is and where it works. Rebuilt on every call. */
export function systemPrompt(context: SessionContext): string {
  return [
    `You are ${context.agent}, a coding agent working on: ${context.title}.`,
    `Your workspace is the git worktree ${context.worktree}, on branch ${context.branch}.`,
    'Use the tools to inspect and change files, run commands and commit your work on your branch.',
    'When the task is done, reply with a short summary of what you changed and stop calling tools.',
  ].join('\n');
}
