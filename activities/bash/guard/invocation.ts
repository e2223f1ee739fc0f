import type { Cwd } from './paths';
import type { GuardNote, GuardReason, HistoryClaim, Refusal } from './reasons';
import type { Taint } from './taint';
import type { Word } from './words';

/** Where a command's stdin comes from, as far as the text shows. */
export type Stdin =
  | { readonly kind: 'inherited' }
  | { readonly kind: 'pipe' }
  | { readonly kind: 'file' }
  | { readonly kind: 'literal'; readonly text: string }
  | { readonly kind: 'dynamic' };

/** One program about to run: its argv as resolved words, and the context the text gives it. */
export interface Invocation {
  readonly argv: readonly Word[];
  /** More words of unknown value follow (xargs input, `find -exec … {} +`). */
  readonly trailingDynamic: boolean;
  readonly cwd: Cwd;
  /** Source text of the whole command, for messages. */
  readonly text: string;
  /** Environment assignments for this program (prefix assignments, `env NAME=…`). */
  readonly assignments: readonly { readonly name: string; readonly value: Word }[];
  readonly stdin: Stdin;
}

export interface GuardScope {
  readonly branch: string;
  readonly worktree: string;
}

/** Mutable shell state that flows through a command list: the working directory and the pushd stack. */
export interface ShellState {
  cwd: Cwd;
  oldCwd: Cwd | undefined;
  stack: Cwd[];
  /** Nesting depth of loops: a `cd` in a loop body may run any number of times. */
  loopDepth: number;
  /** The code names PWD, OLDPWD, DIRSTACK or CDPATH outside an expansion: `cd` targets can no longer be trusted. */
  dirVars: boolean;
  /** What the guard could not judge so far; shared (by reference) by every copy of the state in one decision. */
  notes: GuardNote[];
  /** Git commands allowed on the condition that they stay on the child's own history; shared like `notes`. */
  claims: HistoryClaim[];
  /** Where each variable's values come from (see taint.ts); replaced per script, inherited by nested scripts. */
  taint: Taint;
  /** PATH holds a directory the command can write (or a value read at run time) before the system directories. */
  writablePath: boolean;
  /** `set -e` is on: a failing plain command ends the script, so a failed `cd` does not carry on elsewhere. */
  errexit: boolean;
}

/** Records something the guard cannot judge; the sandbox under the guard decides it. */
export function note(state: ShellState, construct: string, why: string, reason?: GuardReason): void {
  const shown = construct.length > 120 ? `${construct.slice(0, 120)}…` : construct;
  if (!state.notes.some((n) => n.construct === shown && n.why === why)) state.notes.push({ construct: shown, why, ...(reason ? { reason } : {}) });
}

/** Recursion into shell code found in arguments (`sh -c '…'`, `flock -c '…'`). */
export interface ScriptAnalyzer {
  script(source: string, state: ShellState, options: { readonly zsh?: boolean; readonly origin: string; readonly stdin?: Stdin }): Refusal | undefined;
}
