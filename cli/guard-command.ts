import { isAbsolute, resolve } from 'node:path';
import { Command, CommanderError } from 'commander';
import type { GuardDecision } from '../activities/bash/guard';

/** Exit codes of `orchard guard`: the decision, or a usage error. */
const GUARD_EXIT = { allow: 0, usage: 2, deny: 3 } as const;

/**
 * `orchard guard --branch <B> [--worktree <W>] [--json] -- '<command>'`: a dry run of the bash guard for an
 * isolated child on branch B in worktree W (default: the current directory). It runs the same code as the bash
 * activity and prints the decision; exit 0 allow, 3 deny, 2 bad usage.
 */
export function registerGuardCommand(program: Command): Command {
  const cmd = program
    .command('guard')
    .description('dry-run the bash guard for an isolated child session: prints the decision and why (exit 0 allow, 3 deny, 2 bad usage)')
    .requiredOption('--branch <branch>', "the session's own branch")
    .option('--worktree <path>', "the session's worktree (default: the current directory)")
    .option('--json', 'print the decision as JSON')
    .argument('<command...>', 'the bash command, as one quoted word after `--` (several words are joined with spaces)')
    .addHelpText('after', "\nExample:\n  orchard guard --branch orchard/s1/work --worktree /work/wt/s1 -- 'git push origin HEAD:main'")
    .exitOverride(exitOnBadUsage)
    .action(async (words: string[], options: { branch: string; worktree?: string; json?: boolean }) => {
      const command = words.join(' ');
      const branch = options.branch.trim();
      if (!command.trim() || !branch || /\s/.test(branch)) {
        console.error(`orchard guard: ${!branch || /\s/.test(branch) ? 'give a branch name with --branch' : 'give the command to check after --'}`);
        process.exitCode = GUARD_EXIT.usage;
        return;
      }
      const worktree = options.worktree === undefined ? process.cwd() : isAbsolute(options.worktree) ? options.worktree : resolve(options.worktree);
      // Loaded here, not for every orchard command: the guard's parser is a wasm module (start time).
      const { formatUnsure, guardCommand } = await import('../activities/bash/guard');
      const decision = await guardCommand(command, { branch, worktree, isolated: true });
      console.log(options.json ? JSON.stringify(toJson(decision, command, branch, worktree), null, 2) : toText(decision, command, formatUnsure(decision)));
      process.exitCode = decision.allowed ? GUARD_EXIT.allow : GUARD_EXIT.deny;
    });
  return cmd;
}

/** For commands with exit codes of their own: help and version exit 0; everything commander rejects is bad usage (2). */
export function exitOnBadUsage(err: CommanderError): never {
  if (err.code === 'commander.helpDisplayed' || err.code === 'commander.help' || err.code === 'commander.version') process.exit(0);
  process.exit(GUARD_EXIT.usage);
}

function toJson(decision: GuardDecision, command: string, branch: string, worktree: string) {
  return { decision: decision.allowed ? 'allow' : 'deny', command, branch, worktree, ...decision };
}

/** `unsure`: the guard's note on what it could not settle (formatUnsure), empty when none. */
function toText(decision: GuardDecision, command: string, unsure: string): string {
  if (decision.allowed) {
    // A reset or rebase is allowed on a condition the repository settles when the command runs (not in a dry run).
    const claims = (decision.history ?? [])
      .filter((c) => c.kind !== 'reattach')
      .map((c) => `- ${c.construct}: allowed only if it keeps the branch on its own commits (checked against the repository when it runs)`);
    return [`allow: ${command}`, unsure, ...claims].filter(Boolean).join('\n');
  }
  return [`deny (${decision.reason}): ${decision.refused}`, `why: ${decision.why}`, `instead: ${decision.instead}`].join('\n');
}
