import type { Parser } from 'web-tree-sitter';
import type { ShellState } from './invocation';
import { loadBashParser } from './parser';
import { normalizeWorktree } from './paths';
import { GUARD_REASONS, type GuardContext, type GuardDecision, type Refusal } from './reasons';
import { TOP_LEVEL_TAINT } from './taint';
import { analyzeScript } from './walk';

/**
 * The bash guard for an isolated child session: decides, before a command runs, whether it may run in the
 * child's worktree W on its branch B. Synchronous once the parser is loaded; the same code backs the bash
 * activity and `orchard guard`.
 *
 * Limits, stated where they apply: the guard reads command text, not files. Code in files the agent wrote
 * (`bash x.sh`, `npm test`, a Makefile, `python3 -m`, a hook under a `core.hooksPath` inside W, a
 * `~/.gitconfig` in the session HOME written by such a program), a symlink inside W that points outside it,
 * and repository config that changes what a plain command does (remote.<name>.mirror, fetch refspecs into
 * refs/heads) are outside its view. It never calls such a command safe: what it cannot judge is allowed with
 * `unsure` notes, and the kernel sandbox under it decides (see `guardVerdict` for running without one).
 */
export function decideCommand(parser: Parser, command: string, context: GuardContext): GuardDecision {
  if (!context.isolated) return { allowed: true };
  if (!context.branch || /\s/.test(context.branch)) throw new TypeError(`guard context: invalid branch ${JSON.stringify(context.branch)}`);
  const worktree = normalizeWorktree(context.worktree);
  const scope = { branch: context.branch, worktree };
  const state: ShellState = {
    cwd: { kind: 'known', path: worktree },
    oldCwd: undefined,
    stack: [],
    loopDepth: 0,
    dirVars: false,
    notes: [],
    claims: [],
    taint: TOP_LEVEL_TAINT,
    writablePath: false,
    errexit: false,
  };
  let refused: Refusal | undefined;
  try {
    refused = analyzeScript(parser, command, scope, state, { depth: 0, stdin: { kind: 'inherited' } });
  } catch (err) {
    // Pathological nesting exhausts the stack of the recursive walk: refuse rather than fail the tool call.
    if (!(err instanceof RangeError)) throw err;
    refused = {
      reason: 'unsupported_input',
      refused: command.length > 80 ? `${command.slice(0, 80)}…` : command,
      why: 'the command is nested too deeply to analyse',
    };
  }
  if (!refused) {
    return {
      allowed: true,
      ...(state.notes.length > 0 ? { unsure: state.notes } : {}),
      ...(state.claims.length > 0 ? { history: state.claims } : {}),
    };
  }
  return refusedDecision(refused, context);
}

/** A refusal as a decision, with the session's branch and worktree filled into its texts. */
export function refusedDecision(refused: Refusal, context: Pick<GuardContext, 'branch' | 'worktree'>): GuardDecision {
  const fill = (text: string) => text.replaceAll('{branch}', context.branch).replaceAll('{worktree}', normalizeWorktree(context.worktree));
  return {
    allowed: false,
    reason: refused.reason,
    refused: refused.refused,
    why: fill(refused.why),
    instead: fill(refused.instead ?? GUARD_REASONS[refused.reason].instead),
  };
}

/** Loads the parser (once per process) and decides. */
export async function guardCommand(command: string, context: GuardContext): Promise<GuardDecision> {
  if (!context.isolated) return { allowed: true };
  return decideCommand(await loadBashParser(), command, context);
}

/** The refusal as the bash tool returns it to the model: what, why, and what to do instead. */
export function formatRefusal(decision: GuardDecision): string {
  if (decision.allowed) return 'allowed';
  return [`Refused by the workspace guard (${decision.reason}): ${decision.refused}`, `Why: ${decision.why}`, `Instead: ${decision.instead}`].join('\n');
}

/**
 * The lines the bash tool result carries for an allowed command the guard could not fully judge; empty when it
 * judged everything.
 */
export function formatUnsure(decision: GuardDecision): string {
  if (!decision.allowed || !decision.unsure?.length) return '';
  return [
    'The guard could not judge every part of this command from its text; the sandbox decides:',
    ...decision.unsure.map((n) => `- ${n.construct}: ${n.why}`),
  ].join('\n');
}

/**
 * The decision to act on. Confined (the kernel sandbox runs the command), what the guard could not judge is
 * allowed and noted; unconfined (ORCHARD_SANDBOX=off, the guard alone), it is refused as `guard_cannot_judge`,
 * since nothing else would stop it.
 */
export function guardVerdict(decision: GuardDecision, options: { readonly confined: boolean }): GuardDecision {
  if (!decision.allowed || !decision.unsure?.length || options.confined) return decision;
  const first = decision.unsure[0];
  const more = decision.unsure.length > 1 ? ` (and ${decision.unsure.length - 1} more)` : '';
  const reason = first.reason ?? 'guard_cannot_judge';
  return {
    allowed: false,
    reason,
    refused: first.construct,
    why: `${first.why}${more}; without the sandbox nothing else would confine it`,
    instead: GUARD_REASONS[reason].instead,
  };
}

export { loadBashParser } from './parser';
export { GUARD_REASONS, GUARD_REASON_CODES } from './reasons';
export type { GuardContext, GuardDecision, GuardReason, HistoryClaim } from './reasons';
