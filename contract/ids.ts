import { MEMBER_SESSION_JOINER, memberOfSessionId } from './member-session';

/**
 * Session ids become a branch name (`orchard/<id>/work`), a directory name (`<worktreeRoot>/<id>`) and part of
 * workflow ids, so they are restricted to characters that are safe in all three. Pure: the workflow, the
 * client and the activities call the same check and so accept exactly the same ids.
 */
export const SESSION_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** The branch prefix every session branch lives under; the guard and the backstop hook match on it. */
export const SESSION_BRANCH_PREFIX = 'orchard/';

/**
 * Why `id` is not a plain id, or undefined when it is: 1-64 characters from `A-Z a-z 0-9 . _ -`, starting with a
 * letter or digit, and a valid last component of a git branch. Ordinary session ids, team ids and orchestrator ids
 * are plain ids.
 */
export function plainIdProblem(id: unknown): string | undefined {
  if (typeof id !== 'string') return 'session id must be a string';
  if (!SESSION_ID_PATTERN.test(id)) {
    return `session id ${JSON.stringify(id.slice(0, 80))} is invalid: use 1-64 characters from A-Z a-z 0-9 . _ -, ` + 'starting with a letter or digit';
  }
  // git check-ref-format rules the pattern alone does not exclude (the id is the last component of a branch).
  if (id.includes('..')) return `session id ${JSON.stringify(id)} is invalid: it must not contain ".."`;
  if (id.endsWith('.')) return `session id ${JSON.stringify(id)} is invalid: it must not end with "."`;
  if (id.toLowerCase().endsWith('.lock')) {
    return `session id ${JSON.stringify(id)} is invalid: it must not end with ".lock"`;
  }
  return undefined;
}

/**
 * Why `id` cannot be a session id, or undefined when it can: a plain id, or a team Member's session id
 * `<team id>__<member id>` (contract/member-session.ts), whose team id is a plain id — so it may be longer
 * than 64 characters (at most 64 + 2 + 24). A member id has no `.`, so such an id never breaks a git rule the plain
 * team id keeps. Accepts every id a session may already have; what may be created is `ordinarySessionIdProblem`'s.
 */
export function sessionIdProblem(id: unknown): string | undefined {
  if (typeof id !== 'string') return 'session id must be a string';
  const member = memberOfSessionId(id);
  if (member && plainIdProblem(member.teamId) === undefined) return undefined;
  return plainIdProblem(id);
}

/**
 * Why a session that is not a team's Member cannot be created with `id` (a `session create`, an orchestrator's
 * child): `__` is reserved for Members' session ids, so nobody else can take a Member's id — not by accident, not
 * before its team gets to it.
 */
export function ordinarySessionIdProblem(id: unknown): string | undefined {
  const problem = plainIdProblem(id);
  if (problem) return problem;
  if ((id as string).includes(MEMBER_SESSION_JOINER)) {
    return `session id ${JSON.stringify(id)} is reserved: "${MEMBER_SESSION_JOINER}" marks a team member's session (<teamId>${MEMBER_SESSION_JOINER}<memberId>); choose an id without it`;
  }
  return undefined;
}

/** The last component of a session's branch: `orchard/<sessionId>/work`. */
export const SESSION_BRANCH_LEAF = 'work';

/**
 * The branch a session works on, `orchard/<sessionId>/work`. Call only with an id that passed `sessionIdProblem`.
 * The branch lives in a ref directory of its own, `refs/heads/orchard/<sessionId>/`, so the sandbox can make that
 * directory writable (git writes a ref as `<ref>.lock` + rename beside it) while every other ref stays read-only
 * (activities/bash/sandbox.ts). Sessions created before that were on `orchard/<sessionId>`; prepareWorktree moves
 * them (migrateSessionBranch).
 */
export function sessionBranch(sessionId: string): string {
  return `${SESSION_BRANCH_PREFIX}${sessionId}/${SESSION_BRANCH_LEAF}`;
}

/**
 * The holder of a session's worktree lease: its execution chain, `<namespace>/<workflowId>@<firstRunId>`.
 * Continue-as-new keeps the chain (and so the lease); a new session started on the same worktree is a different
 * holder. The namespace is part of it because one Postgres ledger may serve workers of several namespaces, and
 * a workflow id alone names a chain only within its namespace. In workflow code pass `workflowInfo().namespace`;
 * without it the holder keeps the form written before namespaces were recorded, `<workflowId>@<firstRunId>`,
 * which parseLeaseHolder reads as namespace `default`.
 */
export function leaseHolder(workflowId: string, firstRunId: string, namespace?: string): string {
  return namespace === undefined ? `${workflowId}@${firstRunId}` : `${namespace}/${workflowId}@${firstRunId}`;
}

export interface LeaseHolderParts {
  readonly namespace: string;
  readonly workflowId: string;
  readonly firstRunId: string;
}

/** The namespace holders written without one belong to. */
export const LEGACY_HOLDER_NAMESPACE = 'default';

export function parseLeaseHolder(holder: string): LeaseHolderParts | undefined {
  const at = holder.lastIndexOf('@');
  if (at <= 0 || at === holder.length - 1) return undefined;
  const chain = holder.slice(0, at);
  const firstRunId = holder.slice(at + 1);
  // Orchard's workflow ids are `<kind>/<id>` with no slash in the id, so a chain with a second slash starts with a
  // namespace; one with a single slash is a holder written before namespaces were recorded.
  const slash = chain.indexOf('/');
  const second = slash < 0 ? -1 : chain.indexOf('/', slash + 1);
  if (second < 0) return { namespace: LEGACY_HOLDER_NAMESPACE, workflowId: chain, firstRunId };
  if (slash === 0 || second === slash + 1 || second === chain.length - 1) return undefined;
  return { namespace: chain.slice(0, slash), workflowId: chain.slice(slash + 1), firstRunId };
}

/** A readable id from a title: lower case, `-` between words, at most 40 characters (`fallback` when none is left). */
export function slugOf(text: string, fallback: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '')
      .slice(0, 40) || fallback
  );
}
