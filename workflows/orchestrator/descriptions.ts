/**
 * `update_orchestrator_agent_description` (invariant 6): a change to a child's routing metadata is proposed
 * (`confirmed: false` returns a token and the exact change) and takes effect only with `confirmed: true` and a
 * token that appeared in a later *user* message. Parsing and the comparison of a confirmation with its proposal
 * are pure and live here; the workflow holds the proposals and sees the user's messages.
 */
import type { RoutingChange } from '../messages';

export type DescriptionCall =
  | { readonly ok: true; readonly sessionID: string; readonly change: RoutingChange; readonly confirmed: boolean; readonly token?: string }
  | { readonly ok: false; readonly code: 'description_call_invalid'; readonly message: string };

const MAX_DESCRIPTION_CHARS = 2_000;
const MAX_ALIASES = 20;

function invalid(message: string): DescriptionCall {
  return { ok: false, code: 'description_call_invalid', message: `${message}; nothing was changed` };
}

export function parseDescriptionCall(args: Record<string, unknown>): DescriptionCall {
  const { sessionID, routingDescription, routingAliases, confirmed, confirmationToken } = args;
  if (typeof sessionID !== 'string' || sessionID.trim() === '') return invalid('sessionID must name a child');
  if (typeof confirmed !== 'boolean') return invalid('confirmed must be true or false');
  if (routingDescription !== undefined && (typeof routingDescription !== 'string' || routingDescription.length > MAX_DESCRIPTION_CHARS)) {
    return invalid(`routingDescription must be a string of at most ${MAX_DESCRIPTION_CHARS} characters`);
  }
  if (
    routingAliases !== undefined &&
    (!Array.isArray(routingAliases) || routingAliases.length > MAX_ALIASES || routingAliases.some((a) => typeof a !== 'string' || a.trim() === ''))
  ) {
    return invalid(`routingAliases must be an array of at most ${MAX_ALIASES} non-empty strings`);
  }
  if (confirmationToken !== undefined && typeof confirmationToken !== 'string') return invalid('confirmationToken must be a string');
  if (!confirmed && routingDescription === undefined && routingAliases === undefined) {
    return invalid('propose a routingDescription, routingAliases, or both');
  }
  const change: RoutingChange = {
    ...(routingDescription !== undefined ? { routingDescription: routingDescription as string } : {}),
    ...(routingAliases !== undefined ? { routingAliases: (routingAliases as string[]).map((a) => a.trim()) } : {}),
  };
  return { ok: true, sessionID: sessionID.trim(), change, confirmed, token: confirmationToken as string | undefined };
}

/** Whether a confirmation names the proposed change (fields it leaves out are taken from the proposal). */
export function sameChange(proposed: RoutingChange, confirming: RoutingChange): boolean {
  if (confirming.routingDescription !== undefined && confirming.routingDescription !== proposed.routingDescription) return false;
  if (confirming.routingAliases !== undefined) {
    const a = proposed.routingAliases ?? [];
    const b = confirming.routingAliases;
    if (a.length !== b.length || a.some((x, i) => x !== b[i])) return false;
  }
  return true;
}
