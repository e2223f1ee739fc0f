/**
 * `update_orchestrator_agent_description` (invariant 6): a change to a child's routing metadata is proposed
 * (`confirmed: false` returns a token and the exact change) and takes effect only with `confirmed: true` and a
 * token that appeared in a later *user* message. Parsing and the comparison of a confirmation with its proposal
 * are pure and live here; the workflow holds the proposals and sees the user's messages.
 */
import type { RoutingChange } from '../../contract/messages';

export type DescriptionCall =
  | { readonly ok: true; readonly sessionID: string; readonly change: RoutingChange; readonly confirmed: boolean; readonly token?: string }
  | { readonly ok: false; readonly code: 'description_call_invalid' | 'invalid_input'; readonly message: string };

/**
 * Caps on the routing metadata a model writes (a create's and this tool's alike). The orchestrator's ledger carries
 * it across continue-as-new for as long as the child is open, in one payload of at most 2 MB for the whole fleet,
 * so a value over a cap is refused with the cap in the message, never cut short.
 */
export interface RoutingCaps {
  readonly descriptionChars: number;
  readonly aliases: number;
  readonly aliasChars: number;
  /** What a cap counts: UTF-8 bytes (what the carried state weighs), or characters (before issue 18). */
  readonly unit: 'bytes' | 'characters';
}

/** A string's UTF-8 length, computed in plain JS (workflow code has no Buffer). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    bytes += code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
  }
  return bytes;
}
export const MAX_ROUTING_DESCRIPTION_CHARS = 500;
export const MAX_ROUTING_ALIASES = 8;
export const MAX_ROUTING_ALIAS_CHARS = 64;
const ROUTING_CAPS: RoutingCaps = {
  descriptionChars: MAX_ROUTING_DESCRIPTION_CHARS,
  aliases: MAX_ROUTING_ALIASES,
  aliasChars: MAX_ROUTING_ALIAS_CHARS,
  unit: 'bytes',
};
/** The caps before issue 18: what a workflow task recorded before them must be parsed with (behind `patched()`). */
export const ROUTING_CAPS_BEFORE_ISSUE_18: RoutingCaps = {
  descriptionChars: 2_000,
  aliases: 20,
  aliasChars: Number.POSITIVE_INFINITY,
  unit: 'characters',
};

/** Why routing metadata (already known to be a string and an array of strings) is over a cap, if it is. */
export function routingCapProblem(description: string | undefined, aliases: readonly string[] | undefined, caps = ROUTING_CAPS): string | undefined {
  const size = (text: string) => (caps.unit === 'bytes' ? utf8Length(text) : text.length);
  if (description !== undefined && size(description) > caps.descriptionChars) {
    return (
      `routingDescription is ${size(description)} ${caps.unit}; the limit is ${caps.descriptionChars}: ` +
      'say in a sentence or two which requests belong to this child'
    );
  }
  if (aliases !== undefined && aliases.length > caps.aliases) {
    return `routingAliases has ${aliases.length} aliases; the limit is ${caps.aliases}: keep the names requests really use`;
  }
  const long = aliases?.findIndex((a) => size(a) > caps.aliasChars) ?? -1;
  if (long >= 0) {
    return (
      `routingAliases[${long}] is ${size(aliases![long])} ${caps.unit}; the limit is ${caps.aliasChars}: ` +
      'an alias is a short name of the topic, like "PR 1741"'
    );
  }
  return undefined;
}

function invalid(message: string, code: 'description_call_invalid' | 'invalid_input' = 'description_call_invalid'): DescriptionCall {
  return { ok: false, code, message: `${message}; nothing was changed` };
}

/** `caps`: ROUTING_CAPS, or ROUTING_CAPS_BEFORE_ISSUE_18 when replaying a workflow task recorded before them. */
export function parseDescriptionCall(args: Record<string, unknown>, caps = ROUTING_CAPS): DescriptionCall {
  const { sessionID, routingDescription, routingAliases, confirmed, confirmationToken } = args;
  if (typeof sessionID !== 'string' || sessionID.trim() === '') return invalid('sessionID must name a child');
  if (typeof confirmed !== 'boolean') return invalid('confirmed must be true or false');
  if (routingDescription !== undefined && typeof routingDescription !== 'string') return invalid('routingDescription must be a string');
  if (routingAliases !== undefined && (!Array.isArray(routingAliases) || routingAliases.some((a) => typeof a !== 'string' || a.trim() === ''))) {
    return invalid('routingAliases must be an array of non-empty strings');
  }
  const tooLong = routingCapProblem(
    routingDescription,
    (routingAliases as string[] | undefined)?.map((a) => a.trim()),
    caps,
  );
  if (tooLong) return invalid(tooLong, 'invalid_input');
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
