/**
 * Why the bash guard refuses a command, as data: every code the guard can return, with a one-line summary
 * and the default "what to do instead". `{branch}` and `{worktree}` are filled in per session.
 */

/** The route for anything that integrates or moves shared refs: the orchestrator does it, on request. */
export const INTEGRATION_ROUTE =
  'Integration and shared refs are the orchestrator\'s job: ask it with `session send <orchestrator> "<what you need ' +
  'integrated, e.g. merge main into {branch}>"` (use the orchestrator\'s session id; never guess one), then keep working on {branch}.';

export const GUARD_REASONS = {
  unsupported_input: {
    summary: 'the command text is too long or contains control characters',
    instead: 'Send a shorter command (under 10,000 characters) without NUL, carriage returns or other control characters.',
  },
  parse_error: {
    summary: 'the command does not parse as bash (or the parser cannot read it)',
    instead: 'Fix the syntax, or split the command into simpler commands (one heredoc per command, no `${ cmd; }`).',
  },
  parser_blind_spot: {
    summary: 'the command uses a construct where the parser and bash disagree about what runs',
    instead:
      'Rewrite it without the construct: use `$(…)` instead of backticks, no backslash-newline inside a word, ' +
      'redirections at the end of the command, no backticks or `$((…))` in heredoc bodies.',
  },
  unsupported_syntax: {
    summary: 'the command uses syntax the guard does not analyse',
    instead: 'Rewrite the command with plain commands, lists, pipelines and quoting.',
  },
  dynamic_command: {
    summary: 'the program to run is computed at run time, so the guard cannot tell what runs',
    instead: 'Spell the command name literally (e.g. `git status`, not `$CMD status` or `$(echo git) status`).',
  },
  dynamic_argument: {
    summary: 'an argument that selects refs, paths, options or code is computed at run time',
    instead: 'Write the branch, path or option literally in the command.',
  },
  eval_or_source: {
    summary: '`eval`, `source` and `.` run code the guard cannot see',
    instead: 'Run the commands directly instead of through eval or source.',
  },
  trap: {
    summary: "`trap` runs code later, outside the guard's view",
    instead: 'Run the cleanup command directly at the end of the command list.',
  },
  function_or_alias: {
    summary: 'function and alias definitions (and `hash -p`, `enable`) change what a command name runs',
    instead: 'Run the commands directly, without defining functions or aliases.',
  },
  hidden_execution: {
    summary: 'a construct that can execute code hidden in data (arithmetic on variables, `${x@P}`, indirect expansion, name arguments)',
    instead: 'Use literal numbers and names; compute with `expr` or `seq` instead of shell arithmetic on variables.',
  },
  shell_env_override: {
    summary: 'an environment variable that makes the shell or git run other code (BASH_ENV, PS4, EDITOR, PAGER, LD_PRELOAD, HOME …)',
    instead: 'Run the command without overriding that variable.',
  },
  shell_from_stdin: {
    summary: 'a shell that reads its script from stdin, a pipe, a heredoc, a here-string or a process substitution',
    instead: "Run the commands directly, or pass them literally with `bash -c '…'`.",
  },
  unresolved_launcher: {
    summary: 'a program that launches other commands in a way the guard does not model',
    instead: 'Run the inner command directly (without sudo, ssh, watch, script, an unknown wrapper option …).',
  },
  inline_interpreter: {
    summary: 'inline interpreter code (node -e, python3 -c, perl -e, awk system(), sed e …) that can run git or other programs',
    instead: 'Run git directly in bash; keep interpreter one-liners free of process spawning.',
  },
  unknown_git_subcommand: {
    summary: 'a git subcommand the guard does not know (it may be an alias or a program it does not model)',
    instead: 'Use the plain git subcommand (e.g. `git status`, `git commit`); aliases are not resolved.',
  },
  unknown_git_option: {
    summary: 'a git option the guard does not recognise for this subcommand (or an ambiguous abbreviation)',
    instead: 'Spell the option in full, or use a simpler form of the command.',
  },
  git_config_exec: {
    summary: 'a git override that can run programs (`-c alias.*`, `core.hooksPath`, `core.fsmonitor`, `--exec-path=` …)',
    instead: 'Run git without the override.',
  },
  git_config_override: {
    summary: "a `-c` / `--config-env` override (or `--namespace`) outside the guard's allowlist; it can redirect git",
    instead: 'Run git without the override (allowed: user.*, color.*, advice.*, core.quotepath, log/diff/status display settings).',
  },
  git_env_override: {
    summary: "a GIT_* environment variable that redirects git's repository, index, config or programs",
    instead: 'Run git without the variable; use `git -C <path inside {worktree}>` to pick a directory.',
  },
  git_runs_program: {
    summary: 'a git command that runs arbitrary programs (hooks, submodule foreach, upload-pack/receive-pack overrides, pagers …)',
    instead: 'Run the program directly instead of through git.',
  },
  outside_worktree: {
    summary: "git or a file write aimed outside this session's worktree",
    instead: 'Stay inside {worktree}: no `cd`, `-C`, `--git-dir`, `--work-tree` or write target outside it. ' + INTEGRATION_ROUTE,
  },
  git_metadata_write: {
    summary: 'a file write into git metadata (`.git`), which would redirect or corrupt the shared repository',
    instead: 'Change the repository only through git commands on {branch}.',
  },
  moves_other_ref: {
    summary: "the command moves, creates, deletes or pushes a ref other than this session's branch",
    instead: 'Only {branch} may change (commit on it; push it with `git push origin HEAD` or `git push origin {branch}`). ' + INTEGRATION_ROUTE,
  },
  switches_branch: {
    summary: 'the command would move this worktree off its branch',
    instead:
      'Stay on {branch}. To restore files use `git restore <path>` or `git checkout <commit> -- <path>`; to look at another ' +
      'branch use `git show <branch>:<path>` or `git diff <branch>`. ' +
      INTEGRATION_ROUTE,
  },
  shared_state: {
    summary: 'the command writes state shared by every worktree (config, stash, worktrees, object store maintenance, remotes)',
    instead: 'Leave shared repository state to the orchestrator. To set work aside, commit it on {branch}. ' + INTEGRATION_ROUTE,
  },
  integration_policy: {
    summary: "merging, pulling, or resetting or rebasing onto commits of other branches is integration: the orchestrator's job",
    instead:
      "Resets and rebases within {branch}'s own commits are fine (`git reset --soft HEAD~1`, `git rebase -i HEAD~3`); to unstage " +
      'use `git restore --staged <path>`, to discard edits `git restore <path>`. In a conflicted merge/rebase/cherry-pick/revert/am, ' +
      '`git <verb> --abort` is allowed. ' +
      INTEGRATION_ROUTE,
  },
  implicit_target: {
    summary: 'what this push would update depends on repository configuration (push.default, remote.<name>.push)',
    instead: 'Name the branch: `git push origin HEAD` or `git push -u origin {branch}`.',
  },
  guard_cannot_judge: {
    summary:
      'the guard cannot judge this command from its text (code it cannot read, a program it does not know, values read at run time), and no sandbox confines it',
    instead:
      'Run something the guard can read: plain commands with literal names and paths inside the worktree, and git directly rather ' +
      'than through scripts or interpreters. Or ask the operator to run this session with the sandbox on (ORCHARD_SANDBOX unset).',
  },
} as const satisfies Record<string, { readonly summary: string; readonly instead: string }>;

export type GuardReason = keyof typeof GUARD_REASONS;

/** Every reason code, in the order above. */
export const GUARD_REASON_CODES = Object.keys(GUARD_REASONS) as readonly GuardReason[];

/**
 * Something the guard could not judge from the text (an interpreter running code, a program it does not know,
 * arithmetic on a value read at run time …): the command is allowed, and the sandbox under the guard decides.
 */
export interface GuardNote {
  /** The construct, as written (or a short description of it). */
  readonly construct: string;
  /** Why the text does not settle what it does. */
  readonly why: string;
  /**
   * The refusal it becomes with the guard alone (ORCHARD_SANDBOX=off), when the text shows more than "unknown":
   * inline code that starts git or a shell is `inline_interpreter` there, not merely `guard_cannot_judge`.
   */
  readonly reason?: GuardReason;
}

/**
 * A git command the text allows on one condition only the repository can settle: that the commits it moves the
 * child's branch to, or rewrites, lie on the child's own branch (reachable from no ref but its own). The host
 * checks it before the command runs (activities/git/own-history.ts) and the effect again after.
 *
 * - `move`: `git reset <target>` moves the branch to `target` (a rewind is always its own; anything else must gain
 *   no commit another ref has and drop none).
 * - `rewrite`: a rebase replays the commits since `upstream` onto `onto` (`onto` absent: their merge base,
 *   `--keep-base`); without `upstream`, an operation already in progress goes on (`--continue`, `--skip`, …). HEAD
 *   is detached while it runs, so the sandbox leaves HEAD writable for this command.
 * - `reattach`: a checkout or switch of the child's own branch rewrites HEAD with the value it has.
 */
export interface HistoryClaim {
  readonly construct: string;
  readonly kind: 'move' | 'rewrite' | 'reattach';
  readonly target?: string;
  readonly upstream?: string;
  readonly onto?: string;
}

export type GuardDecision =
  | { readonly allowed: true; readonly unsure?: readonly GuardNote[]; readonly history?: readonly HistoryClaim[] }
  | {
      readonly allowed: false;
      readonly reason: GuardReason;
      /** The offending command text (the innermost command the guard refused). */
      readonly refused: string;
      readonly why: string;
      readonly instead: string;
    };

export interface GuardContext {
  /** The session's own branch (short name, e.g. `orchard/s1`). */
  readonly branch: string;
  /** Absolute path of the session's worktree, where the bash tool starts. */
  readonly worktree: string;
  /** Only isolated children are restricted; other sessions are always allowed. */
  readonly isolated: boolean;
}

/** A refusal as the walker produces it; `instead` defaults to the reason's text. */
export interface Refusal {
  readonly reason: GuardReason;
  readonly refused: string;
  readonly why: string;
  readonly instead?: string;
}

export function refusal(reason: GuardReason, refused: string, why: string, instead?: string): Refusal {
  return { reason, refused, why, instead };
}
