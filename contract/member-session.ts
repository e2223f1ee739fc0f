/**
 * A team Member's session id. It becomes a workflow id (`session/<id>`), a branch (`orchard/<id>/work`) and a
 * worktree directory, so two Members — of one team or of two — must never get the same one, and no other session
 * may get a Member's.
 *
 * `<teamId>__<memberId>`: a member id has no `_` (MEMBER_ID_PATTERN), so the text after the last `_` is the member
 * id and what precedes its `__` the team id — distinct pairs give distinct ids. Ordinary creates refuse `__`
 * (`ordinarySessionIdProblem`), and an orchestrator's children (`<slug>-<6 hex>`) never contain `_`.
 *
 * Teams started before this encoding named their Members `<teamId>-<memberId>` (`legacyMemberSessionId`), which
 * collides (team `a` + member `b-c` and team `a-b` + member `c`). They keep it: the id a Member's session has is
 * the one stored for it in `team_members` when its team first opened (activities/team.ts `openTeam`). A team id
 * has no `__` either (startTeamProblem), so a legacy id is never another Member's encoded one.
 *
 * Pure and workflow-safe; imports nothing, so the session id grammar (contract/ids.ts) can build on it.
 */

/** A Member's id in its team: lower case, digits and `-`, starting with a letter, at most 24; never `_` or `.`. */
export const MEMBER_ID_PATTERN = /^[a-z][a-z0-9-]{0,23}$/;

/** What joins the team id and the member id; ordinary session ids may not contain it. */
export const MEMBER_SESSION_JOINER = '__';

/** Which encoding a team's Members' session ids use: `legacy` `<teamId>-<memberId>`, `v2` `<teamId>__<memberId>`. */
export type MemberSessionIds = 'legacy' | 'v2';

/** A Member's session id. Call with a valid team id and member id (see `memberOfSessionId` for the inverse). */
export function memberSessionId(teamId: string, memberId: string): string {
  return `${teamId}${MEMBER_SESSION_JOINER}${memberId}`;
}

/** The id Members of teams started before `memberSessionId` had (not injective: only for those teams). */
export function legacyMemberSessionId(teamId: string, memberId: string): string {
  return `${teamId}-${memberId}`;
}

/** The session id of `memberId` in `teamId` under `encoding`. */
export function memberSessionIdAs(encoding: MemberSessionIds, teamId: string, memberId: string): string {
  return encoding === 'v2' ? memberSessionId(teamId, memberId) : legacyMemberSessionId(teamId, memberId);
}

/**
 * The team id and member id a `memberSessionId` was made of, or undefined when `sessionId` does not have that
 * shape. Only the shape: the team id part is not validated here (`sessionIdProblem` does that).
 */
export function memberOfSessionId(sessionId: string): { teamId: string; memberId: string } | undefined {
  const last = sessionId.lastIndexOf('_');
  const joiner = last - (MEMBER_SESSION_JOINER.length - 1);
  if (joiner < 1 || sessionId.slice(joiner, last + 1) !== MEMBER_SESSION_JOINER) return undefined;
  const memberId = sessionId.slice(last + 1);
  if (!MEMBER_ID_PATTERN.test(memberId)) return undefined;
  return { teamId: sessionId.slice(0, joiner), memberId };
}
