/**
 * Session ids become a branch name (`orchard/<id>`), a directory name (`<worktreeRoot>/<id>`) and part of
 * workflow ids, so they are restricted to characters that are safe in all three. Pure: the workflow, the
 * client and the activities call the same check and so accept exactly the same ids.
 */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** The branch prefix every session branch lives under; the guard and the backstop hook match on it. */
export const SESSION_BRANCH_PREFIX = 'orchard/';

/** Why `id` cannot be a session id, or undefined when it can. */
export function sessionIdProblem(id: unknown): string | undefined {
  if (typeof id !== 'string') return 'session id must be a string';
  if (!SESSION_ID_PATTERN.test(id)) {
    return (
      `session id ${JSON.stringify(id.slice(0, 80))} is invalid: use 1-64 characters from A-Z a-z 0-9 . _ -, ` +
      'starting with a letter or digit'
    );
  }
  // git check-ref-format rules the pattern alone does not exclude (the id is the last component of a branch).
  if (id.includes('..')) return `session id ${JSON.stringify(id)} is invalid: it must not contain ".."`;
  if (id.endsWith('.')) return `session id ${JSON.stringify(id)} is invalid: it must not end with "."`;
  if (id.toLowerCase().endsWith('.lock')) {
    return `session id ${JSON.stringify(id)} is invalid: it must not end with ".lock"`;
  }
  return undefined;
}

/** The branch a session works on. Call only with an id that passed `sessionIdProblem`. */
export function sessionBranch(sessionId: string): string {
  return `${SESSION_BRANCH_PREFIX}${sessionId}`;
}

/**
 * The holder of a session's worktree lease: its execution chain, `<workflowId>@<firstRunId>`. Continue-as-new
 * keeps the chain (and so the lease); a new session started on the same worktree is a different holder.
 */
export function leaseHolder(workflowId: string, firstRunId: string): string {
  return `${workflowId}@${firstRunId}`;
}

export function parseLeaseHolder(holder: string): { workflowId: string; firstRunId: string } | undefined {
  const at = holder.lastIndexOf('@');
  if (at <= 0 || at === holder.length - 1) return undefined;
  return { workflowId: holder.slice(0, at), firstRunId: holder.slice(at + 1) };
}
