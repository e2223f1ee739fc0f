import { constants } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import type { Command } from 'commander';
import { exitOnBadUsage } from './guard-command';

/** Exit codes of `orchard exec` besides the command's own status. */
const EXEC_EXIT = { usage: 2, refused: 3, changed: 4 } as const;

const MAX_OUTPUT_BYTES = 1024 * 1024;

/**
 * `orchard exec --branch <B> --worktree <W> [--json] -- '<command>'`: runs a command exactly as an isolated child's
 * bash tool does (activities/bash/isolated.ts): the guard, the sandbox (or the guard alone under ORCHARD_SANDBOX=off;
 * refused when the sandbox cannot be built), verification after it, and the ref backstop, which it installs in the
 * repository and marks W for, as a session's preparation does. Exits with the command's status; 3 when refused, 4
 * when verification found a change (printed), 2 for bad usage. `orchard guard` is the dry run of the first layer.
 */
export function registerExecCommand(program: Command): Command {
  return program
    .command('exec')
    .description(
      "run a command as an isolated child's bash tool would (guard, sandbox, verification, backstop): exit = its status; 3 refused, 4 changed what it must not, 2 bad usage",
    )
    .requiredOption('--branch <branch>', "the child's branch, orchard/<sessionId>/work (its worktree must have it checked out)")
    .option('--worktree <path>', "the child's worktree, a linked worktree of the repository (default: the current directory)")
    .option('--timeout <seconds>', 'stop the command after this many seconds', '300')
    .option('--json', 'print {decision, status, changes, …} as JSON instead of the command output')
    .argument('<command...>', 'the bash command, as one quoted word after `--` (several words are joined with spaces)')
    .addHelpText('after', "\nExample:\n  orchard exec --branch orchard/s1/work --worktree .orchard/worktrees/host/s1 -- 'npm test'")
    .exitOverride(exitOnBadUsage)
    .action(async (words: string[], options: { branch: string; worktree?: string; timeout: string; json?: boolean }) => {
      // Loaded here, not for every orchard command (start time).
      const { describeConfinement, resolveConfinement } = await import('../activities/bash/confinement');
      const { formatUnsure } = await import('../activities/bash/guard');
      const { admitIsolated, prepareIsolated, settleIsolated, verifyIsolated } = await import('../activities/bash/isolated');
      const { runBash } = await import('../activities/bash/runner');
      const { branchSessionId } = await import('../activities/bash/sandbox');
      const { describeChanges } = await import('../activities/bash/verify');
      const { installRefBackstop, markWorktreeIsolated } = await import('../activities/git/backstop');
      const command = words.join(' ');
      const branch = options.branch.trim();
      const sessionId = branchSessionId(branch);
      const timeoutSeconds = Number(options.timeout);
      const usage = (message: string) => {
        console.error(`orchard exec: ${message}`);
        process.exitCode = EXEC_EXIT.usage;
      };
      if (!command.trim()) return usage('give the command to run after --');
      if (sessionId === undefined) return usage(`--branch must be a session branch orchard/<sessionId>/work, got ${JSON.stringify(branch)}`);
      if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0)
        return usage(`--timeout must be a positive number of seconds, got ${JSON.stringify(options.timeout)}`);
      const worktree = options.worktree === undefined ? process.cwd() : isAbsolute(options.worktree) ? options.worktree : resolve(options.worktree);

      // The probe and the backstop set-up touch different things: run them side by side (start time).
      const [confinement, backstop] = await Promise.all([
        resolveConfinement(process.env),
        // As a session's preparation does for an isolated child: the backstop hook in the shared hooks, W marked.
        installRefBackstop(worktree)
          .then(() => markWorktreeIsolated(worktree, branch))
          .then(
            () => undefined,
            (err: unknown) => (err instanceof Error ? err.message : String(err)),
          ),
      ]);
      const report = (fields: Record<string, unknown>) => {
        if (options.json) console.log(JSON.stringify({ command, branch, worktree, confinement: confinement.mode, ...fields }, null, 2));
      };
      if (!options.json) console.error(`orchard exec: ${describeConfinement(confinement)}`);
      const admission = await admitIsolated({ command, worktree, branch, confinement });
      if (!admission.admitted) {
        if (options.json) report({ decision: 'deny', refusal: { code: admission.code, message: admission.message }, ...admission.decision });
        else console.error(admission.message);
        process.exitCode = EXEC_EXIT.refused;
        return;
      }
      if (backstop !== undefined) return usage(`${worktree} cannot be set up as an isolated child's worktree: ${backstop}`);
      let prepared;
      try {
        if (confinement.mode === 'unavailable') throw new Error(confinement.reason); // admitIsolated refused it already
        prepared = await prepareIsolated({ command, worktree, branch, sessionId, confinement, decision: admission.decision });
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        if (options.json) report({ decision: 'deny', refusal: { code: 'sandbox_unavailable', message } });
        else console.error(message);
        process.exitCode = EXEC_EXIT.refused;
        return;
      }
      const result = await runBash({
        command,
        argv: prepared.argv,
        cwd: worktree,
        env: prepared.env,
        timeoutMs: timeoutSeconds * 1000,
        maxOutputBytes: MAX_OUTPUT_BYTES,
      });
      const changes = await verifyIsolated(prepared);
      // Verified: the command's new objects join the shared store (held ones stay in its quarantine).
      if (changes.length === 0) await settleIsolated(prepared);
      const status = result.exitCode ?? (result.signal ? 128 + (signalNumber(result.signal) ?? 0) : 1);
      if (options.json) {
        report({
          decision: 'allow',
          unsure: 'unsure' in admission.decision ? admission.decision.unsure : undefined,
          status,
          signal: result.signal,
          timedOut: result.timedOut,
          changes,
          stdout: result.stdout,
          stderr: result.stderr,
        });
      } else {
        const notes = formatUnsure(admission.decision);
        if (notes) console.error(notes);
        process.stdout.write(result.stdout);
        process.stderr.write(result.stderr);
        if (result.timedOut) console.error(`orchard exec: timed out after ${timeoutSeconds} s; the command's processes were stopped`);
        if (changes.length > 0) console.error(`orchard exec: verification found changes outside the allowance:\n${describeChanges(changes)}`);
      }
      process.exitCode = changes.length > 0 ? EXEC_EXIT.changed : status;
    });
}

function signalNumber(signal: string): number | undefined {
  return constants.signals[signal as NodeJS.Signals];
}

/**
 * `orchard sandbox [--json]`: whether this machine (with this environment) would confine isolated children, by the
 * same probe a worker runs at start. Exit 0 when confined; 1 when not (ORCHARD_SANDBOX=off, or the sandbox cannot
 * be built: the reason is printed).
 */
export function registerSandboxCommand(program: Command): Command {
  return program
    .command('sandbox')
    .description("check that this host confines isolated children (the worker's start-up probe): exit 0 confined, 1 not, with the reason")
    .option('--json', 'print {mode, reason?, bwrap?, version?} as JSON')
    .action(async (options: { json?: boolean }) => {
      const { describeConfinement, resolveConfinement } = await import('../activities/bash/confinement');
      const confinement = await resolveConfinement(process.env);
      console.log(options.json ? JSON.stringify(confinement, null, 2) : describeConfinement(confinement));
      process.exitCode = confinement.mode === 'sandbox' ? 0 : 1;
    });
}
