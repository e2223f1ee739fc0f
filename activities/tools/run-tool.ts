import { z } from 'zod';
import type { Confinement } from '../bash/confinement';
import { formatUnsure, type GuardDecision } from '../bash/guard';
import { admitIsolated, prepareIsolated, settleIsolated, verifyIsolated } from '../bash/isolated';
import { describeChanges, type ProtectedChange } from '../bash/verify';
import type { VerificationHold } from '../store/holds';
import { buildCommandEnv } from '../bash/env';
import { noticeForBash } from '../bash/conflict-notice';
import type { CommandSlots } from '../bash/command-slots';
import { runBash, type SpawnInfo } from '../bash/runner';
import { gitCommit, gitDiff, gitStatus } from '../git/repo-tools';
import { readFileInWorktree, writeFileInWorktree } from '../workspace/files';
import type { ToolOutput } from '../store/dispatch';

export interface ToolContext {
  sessionId: string;
  worktree: string;
  branch: string;
  /** Isolated children get the guard before, the sandbox around, and the ref backstop's branch in their environment. */
  isolated: boolean;
  /** How this host confines isolated children (resolved at worker start); none means refused, fail closed. */
  confinement?: Confinement;
  /**
   * The worktree's verification hold (layer 3): an isolated child's command runs only while none is open, and a
   * command that changed what it must not opens one. Without it, isolated children's commands are refused.
   */
  holds?: {
    open(): Promise<VerificationHold | undefined>;
    hold(command: string, changes: readonly ProtectedChange[]): Promise<VerificationHold>;
  };
  /** Upper bound for one bash command. */
  bashTimeoutMs: number;
  /** Bytes kept per stream / per file shown to the model. */
  maxOutputBytes: number;
  /** Aborts a running command (activity cancellation). */
  signal: AbortSignal;
  /** Called while a command runs, so the activity heartbeats (with what it runs and its latest output, for the Web UI). */
  onTick: (progress?: ToolProgress) => void;
  /** Revalidates the lease; called immediately before each side effect, throws when the caller is stale. */
  beforeSideEffect: () => Promise<void>;
  /** Records the command's process group against the lease; the command runs only once this resolved. */
  onSpawn?: (info: SpawnInfo) => Promise<void>;
  /** The host's command cap (ORCHARD_MAX_COMMANDS). */
  commandSlots?: CommandSlots;
  /** Called once teardown verified that nothing of the group is alive. */
  onGroupGone?: (pgid: number) => Promise<void>;
  /** Called with the typed reason when the call is refused before it runs (a guard reason or an error code). */
  onRefused?: (reason: string) => void;
}

/** A running command as its activity's heartbeat details show it: small (the command cut short, a bounded output tail). */
interface ToolProgress {
  readonly tool: string;
  readonly command: string;
  readonly outputTail: string;
}

/** The command as progress reports show it. */
const PROGRESS_COMMAND_CHARS = 500;

export interface ToolResult extends ToolOutput {
  /** The command was stopped because the activity was cancelled. */
  cancelled?: boolean;
  /** Verification found a change outside the child's allowance: the worktree is now held. */
  changes?: ProtectedChange[];
}

const argsSchemas = {
  bash: z.object({ command: z.string().min(1), timeout_seconds: z.number().positive().optional() }).strict(),
  read_file: z.object({ path: z.string().min(1) }).strict(),
  write_file: z.object({ path: z.string().min(1), content: z.string() }).strict(),
  git_status: z.object({}).strict(),
  git_diff: z.object({ staged: z.boolean().optional(), path: z.string().min(1).optional() }).strict(),
  git_commit: z.object({ message: z.string().min(1), paths: z.array(z.string().min(1)).optional() }).strict(),
} as const;

export type ExecutableTool = keyof typeof argsSchemas;

/** Tools a verification hold stops: bash, and the git tools (git on the host, in the worktree). */
const HOLD_BLOCKS: ReadonlySet<ExecutableTool> = new Set(['bash', 'git_status', 'git_diff', 'git_commit']);

/** Tools whose side effects change the worktree or its branch: fenced by the lease, run at most once. */
const MUTATING: ReadonlySet<ExecutableTool> = new Set(['bash', 'write_file', 'git_commit']);

/** Read-only tools change nothing, so a retry simply runs them again instead of going through a claim. */
export function isMutatingTool(name: string): boolean {
  return !isExecutableTool(name) || MUTATING.has(name);
}

export function isExecutableTool(name: string): name is ExecutableTool {
  return Object.hasOwn(argsSchemas, name);
}

/** A refusal or error the model should read: nothing was changed. */
export function refusal(code: string, message: string): ToolResult {
  return { ok: false, content: `error (${code}): ${message}`, durationMs: 0 };
}

/** Parses the model's arguments and runs one tool. Expected failures come back as results, not throws. */
export async function runTool(name: ExecutableTool, rawArguments: string, ctx: ToolContext): Promise<ToolResult> {
  const refuse = (code: string, message: string): ToolResult => {
    ctx.onRefused?.(code);
    return refusal(code, message);
  };
  let json: unknown;
  try {
    json = rawArguments.trim() === '' ? {} : JSON.parse(rawArguments);
  } catch {
    return refuse('tool_args_invalid', `arguments of ${name} are not valid JSON`);
  }
  const parsed = argsSchemas[name].safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    return refuse('tool_args_invalid', `arguments of ${name} do not match its schema: ${issues}`);
  }
  const started = performance.now();
  const done = (ok: boolean, content: string): ToolResult => ({ ok, content, durationMs: performance.now() - started });
  // An isolated child's command is refused before anything runs when it would reach beyond its own branch.
  // A held worktree runs nothing: not bash, and not the git tools either, which run git on the host, where a `.git`
  // file or admin dir the command changed could point git at config the child wrote.
  if (ctx.isolated && HOLD_BLOCKS.has(name)) {
    if (!ctx.holds) return refuse('verification_hold', "this worker cannot check the worktree's verification hold, so no command runs");
    const hold = await ctx.holds.open();
    if (hold) return refuse('verification_hold', heldMessage(hold));
  }
  let guardNotes: string | undefined;
  let admitted: GuardDecision | undefined;
  if (name === 'bash' && ctx.isolated) {
    const { command } = parsed.data as z.infer<typeof argsSchemas.bash>;
    const admission = await admitIsolated({ command, worktree: ctx.worktree, branch: ctx.branch, confinement: ctx.confinement });
    if (!admission.admitted) {
      ctx.onRefused?.(admission.decision && !admission.decision.allowed ? admission.decision.reason : admission.code);
      const content = admission.code === 'guard_refused' ? admission.message : `error (${admission.code}): ${admission.message}`;
      return { ok: false, content, durationMs: performance.now() - started };
    }
    guardNotes = formatUnsure(admission.decision) || undefined;
    admitted = admission.decision;
  }
  // Tools that change the worktree check the fence right before they do; read-only ones need no lease.
  if (MUTATING.has(name)) {
    try {
      await ctx.beforeSideEffect();
    } catch (err) {
      const code = (err as { type?: string }).type ?? 'lease_stale';
      return refuse(code, err instanceof Error ? err.message : String(err));
    }
  }
  try {
    switch (name) {
      case 'bash': {
        const args = parsed.data as z.infer<typeof argsSchemas.bash>;
        const requested = args.timeout_seconds ? args.timeout_seconds * 1000 : ctx.bashTimeoutMs;
        // Admitted above, so an isolated child's confinement is sandbox or off here.
        const isolated =
          ctx.isolated && ctx.confinement && ctx.confinement.mode !== 'unavailable'
            ? await prepareIsolated({
                command: args.command,
                worktree: ctx.worktree,
                branch: ctx.branch,
                sessionId: ctx.sessionId,
                confinement: ctx.confinement,
                decision: admitted,
              })
            : undefined;
        const result = await runBash({
          command: args.command,
          argv: isolated?.argv,
          cwd: ctx.worktree,
          env: isolated?.env ?? buildCommandEnv({ worktree: ctx.worktree, sessionId: ctx.sessionId, branch: ctx.branch }),
          timeoutMs: Math.min(requested, ctx.bashTimeoutMs),
          maxOutputBytes: ctx.maxOutputBytes,
          signal: ctx.signal,
          onTick: ({ outputTail }) =>
            ctx.onTick({
              tool: 'bash',
              command: args.command.length > PROGRESS_COMMAND_CHARS ? `${args.command.slice(0, PROGRESS_COMMAND_CHARS)}…` : args.command,
              outputTail,
            }),
          onSpawn: ctx.onSpawn,
          slots: ctx.commandSlots,
        });
        if (result.pgid !== null && result.remaining.length === 0) await ctx.onGroupGone?.(result.pgid);
        // An unrecorded command must not run: one the worker could lose track of could outlive it unseen.
        if (result.notStarted && !result.cancelled) {
          return refuse('command_not_started', `the command did not start (${result.notStartedReason}); none of it ran`);
        }
        const status = result.cancelled
          ? 'cancelled (the process group was stopped)'
          : result.timedOut
            ? `timed out after ${Math.round(result.durationMs / 1000)} s (the process group was stopped)`
            : result.exitCode !== null
              ? `exit code ${result.exitCode}`
              : `killed by ${result.signal}`;
        // Layer 3: compare what the child must not change with what it was before the command (also after a timeout
        // or a cancel: whatever ran, ran). A change holds the worktree until a user resolves it.
        let changes: ProtectedChange[] | undefined;
        let verification: string | undefined;
        if (isolated && !result.notStarted) {
          changes = await verifyIsolated(isolated);
          if (changes.length > 0) verification = heldMessage(await ctx.holds!.hold(args.command, changes));
          else {
            changes = undefined;
            // Verified: its new objects join the shared store (a held command's stay in its quarantine).
            await settleIsolated(isolated);
          }
        }
        // Annotates, never blocks: a conflicted index after the call, or a -X ours/theirs intent in the command. It runs
        // git on the host, so not after a command that changed what it must not (its .git may point anywhere now).
        const notice = changes ? {} : await noticeForBash({ worktree: ctx.worktree, branch: ctx.branch, command: args.command, result });
        const content = [verification, guardNotes, notice.before, status, '--- stdout ---', result.stdout, '--- stderr ---', result.stderr, notice.after]
          .filter((part) => part !== undefined)
          .join('\n');
        return {
          changes,
          ok: result.exitCode === 0 && !result.timedOut && !result.cancelled && changes === undefined,
          content,
          exitCode: result.exitCode,
          stdout: result.stdout,
          stderr: result.stderr,
          durationMs: result.durationMs,
          cancelled: result.cancelled,
        };
      }
      case 'read_file': {
        const args = parsed.data as z.infer<typeof argsSchemas.read_file>;
        return done(true, await readFileInWorktree(ctx.worktree, args.path, { maxBytes: ctx.maxOutputBytes }));
      }
      case 'write_file': {
        const args = parsed.data as z.infer<typeof argsSchemas.write_file>;
        await writeFileInWorktree(ctx.worktree, args.path, args.content);
        return done(true, `wrote ${Buffer.byteLength(args.content)} bytes to ${args.path}`);
      }
      case 'git_status':
        return done(true, await gitStatus(ctx.worktree));
      case 'git_diff': {
        const args = parsed.data as z.infer<typeof argsSchemas.git_diff>;
        return done(true, await gitDiff(ctx.worktree, { ...args, maxBytes: ctx.maxOutputBytes }));
      }
      case 'git_commit': {
        const args = parsed.data as z.infer<typeof argsSchemas.git_commit>;
        const commit = await gitCommit(ctx.worktree, { ...args, branch: ctx.branch });
        return done(true, commit.summary);
      }
    }
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const message = err instanceof Error ? err.message : String(err);
    return { ...done(false, ''), content: `error${typeof code === 'string' ? ` (${code})` : ''}: ${message}` };
  }
}

/** What the model (and the user) reads about a hold: exactly what changed, and that nothing runs here until resolved. */
function heldMessage(hold: VerificationHold): string {
  const changes = Array.isArray(hold.changes) ? describeChanges(hold.changes as ProtectedChange[]) : JSON.stringify(hold.changes);
  return [
    `VERIFICATION HOLD (${hold.heldAt}): the command \`${hold.command.length > 200 ? `${hold.command.slice(0, 200)}…` : hold.command}\` changed what this session must not change:`,
    changes,
    'No further command runs in this worktree until a user resolves the hold (`orchard session resolve-hold ' +
      `${hold.sessionId}\`). Stop and report this to your orchestrator; do not try to undo it yourself.`,
  ].join('\n');
}
