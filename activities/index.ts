import { resolveHold } from './store/holds';
import type { Confinement } from './bash/confinement';
import { join, resolve } from 'node:path';
import type { Pool } from 'pg';
import { isErrorCode } from '../contract/errors';
import { orchardFailure } from '../contract/failures';
import { parseLeaseHolder } from '../contract/ids';
import type { ModelSpec } from '../contract/messages';
import { installRefBackstop, markWorktreeIsolated } from './git/backstop';
import { prepareWorktree, repositoryProblem } from './git/worktree';
import { loadScenario } from './model/scenario';
import { ScriptedProvider } from './model/scripted';
import { modelCallKey, modelStep } from './model/step';
import { ModelError, type ModelProvider } from './model/types';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { resolveLimits } from '../contract/messages';
import { CommandSlots, DEFAULT_MAX_COMMANDS } from './bash/command-slots';
import { startSpawner } from './bash/spawner';
import { reapWorktree, type ReapOptions } from './bash/reaper';
import { acquireLease, releaseHolder, releaseLease, type HolderLiveness } from './store/leases';
import { turnKeyOf } from './store/keys';
import { endTasks, storeTasks } from './store/tasks';
import { storeStartingContext } from './store/starting-context';
import { appendEntry } from './store/transcript';
import { executeTool } from './tools/execute';
import { RunningCalls } from './tools/running-calls';
import type { HostActivities, PrepareWorktreeInput, PreparedSessionWorktree, SharedActivities } from '../contract/activities';
import type { SessionLiveness, TemporalPort } from '../contract/temporal-port';
import { createOrchestratorActivities } from './orchestrator';
import { createTeamActivities, createTeamHostActivities, type TeamActivityHooks } from './team';
import type { VerifierDeps } from './git/verify-result';
import { defaultBudgetFromEnv, limitsFromEnv } from './limits';
import { setMaxListeners } from 'node:events';
import { withHeartbeats, type AbortBinding } from './heartbeat';
import { metrics } from './metrics';

export interface SharedActivityDeps {
  pool: Pool;
  /** The provider for `{ provider: 'default' }` sessions; undefined when none is configured. */
  defaultProvider?: ModelProvider;
  /** The environment session defaults are read from when a session starts (process.env by default). */
  env?: NodeJS.ProcessEnv;
  /** Temporal as orchestrators and teams reach it: start and send to children (the worker's own connection and task queue). */
  temporal?: () => TemporalPort;
  /** The worker's Temporal namespace (lease holders name it). */
  namespace?: string;
  /** Test hooks that widen race windows in team activities (never set in production). */
  teamHooks?: TeamActivityHooks;
  /** This process's running model calls (shared with its host activities, whose `stopCommands` pokes them). */
  modelCalls?: RunningCalls;
  /** How often a session's model call heartbeats (10 s by default; a test stretches it). */
  sessionModelHeartbeatMs?: number;
}

export interface HostActivityDeps {
  pool: Pool;
  hostId: string;
  /** Where this host creates session worktrees. */
  worktreeRoot: string;
  /** Bytes of a command's stdout/stderr (and of a file read) that a tool result keeps. */
  maxOutputBytes?: number;
  /** Whether a lease holder's workflow execution chain is still running (asked of Temporal). */
  holderLiveness: (holder: string) => Promise<HolderLiveness>;
  /** Whether a team's run is running (asked of Temporal): a Member's message to a team that is not is refused. */
  teamLiveness?: (teamId: string) => Promise<SessionLiveness>;
  /** At most this many commands (bash tool calls) run at once on this host (ORCHARD_MAX_COMMANDS). */
  maxConcurrentCommands?: number;
  /** How recorded processes of dead workers are torn down (tests inject a signal sender that cannot kill). */
  reap?: ReapOptions;
  /** Test hooks that widen race windows (e.g. hold worktree preparation until a cancel is sent). */
  hooks?: HostActivityHooks;
  /**
   * How isolated children's commands are confined on this host (resolveConfinement at worker start). Without one,
   * isolated children are refused (fail closed).
   */
  confinement?: Confinement;
  /** Temporal as team activities on this host reach it (a Coordinator tool may message a Member). */
  temporal?: () => TemporalPort;
  /** The worker's Temporal namespace (lease holders name it). */
  namespace?: string;
  /** Test hooks of team activities (never set in production). */
  teamHooks?: TeamActivityHooks;
  /** This process's running model calls (its shared activities'): `stopCommands` pokes a cancelled session's own. */
  modelCalls?: RunningCalls;
}

export interface HostActivityHooks {
  /** Awaited at the start of prepareWorktree (after its first heartbeat); a rejection fails the preparation. */
  beforePrepare?: (input: PrepareWorktreeInput, signal: AbortSignal) => Promise<void>;
  /** Awaited once the lease is taken, before the worktree is created; a rejection fails the preparation. */
  afterLease?: (input: PrepareWorktreeInput, signal: AbortSignal) => Promise<void>;
  /**
   * The cancellation a running tool call's command takes from its activity (default: the activity's own). A test holds
   * it back to show that a cancelled session's direct stop (`stopCommands`) ends the command by itself.
   */
  toolCancellation?: (activity: AbortSignal) => AbortSignal;
}

/** Activities that need no particular host: the model and the store. They run on the shared task queue. */
export function createSharedActivities(deps: SharedActivityDeps): SharedActivities {
  const resolveProvider = async (spec: ModelSpec): Promise<ModelProvider> => {
    if (spec.provider === 'scripted') return new ScriptedProvider(await loadScenario(resolve(spec.scenario)));
    if (!deps.defaultProvider) {
      throw orchardFailure('model_request_rejected', 'this worker has no default model: set ORCHARD_MODEL_URL');
    }
    return deps.defaultProvider;
  };
  const orchestrator = createOrchestratorActivities({ pool: deps.pool, temporal: temporalOf(deps, 'orchestrators') });
  const team = teamActivitiesOf(deps);
  const bind = abortBindingOf(deps);
  return {
    // Dispatch and quiescence activities wait on Temporal, git or processes: they heartbeat while they run, so their
    // heartbeat timeout (workflows/activity-options.ts) notices a lost worker in seconds, and their cancellation
    // ends what they wait on in Temporal.
    ...withHeartbeats(orchestrator, ['createChild', 'sendToChild', 'inspectChildren', 'fundFromParent'], bind),
    // A running execution's watch on its team lasts as long as the execution: it beats every 10 s (its heartbeat timeout
    // is 30 s), not every second, since each beat costs the server two state transitions. A cancel (the execution
    // settled) reaches it with its next beat; the execution does not wait for that.
    ...withHeartbeats(
      withHeartbeats(team, ['coordinatorTool', 'dispatchTask', 'settleExecution', 'yieldExecution', 'checkQuiescent'], bind),
      ['awaitTeamClosed'],
      bind,
      10_000,
    ),
    /** Sessions from histories recorded before execution keys: the task becomes the user message of its turn. */
    async recordTask(input) {
      await appendEntry(deps.pool, { ...turnKeyOf(input), step: 0, ordinal: 0 }, { role: 'user', content: input.task }, { taskId: input.taskId });
    },
    /**
     * Resolves a session's limits once, when its execution chain starts (an activity: the answer is recorded
     * in history, so a replay never reads the worker's environment again).
     */
    async resolveSessionLimits(requested) {
      return resolveLimits(requested, limitsFromEnv(deps.env ?? process.env));
    },
    /** ORCHARD_DEFAULT_BUDGET_TOKENS, read once when a chain starts without a budget (recorded in history). */
    async resolveDefaultBudget() {
      return defaultBudgetFromEnv(deps.env ?? process.env) ?? null;
    },
    /** Accepted tasks' text goes to Postgres; history and continue-as-new carry their ids. */
    async storeTasks(tasks) {
      const inserted = await storeTasks(deps.pool, tasks);
      for (const t of tasks) if (t.coalesced && inserted.has(`${t.executionId}/${t.taskId}`)) metrics.wakeCoalesced(t.coalesced.kind, t.coalesced.events);
    },
    /** Terminal states of tasks; a terminal row never changes again. */
    async endTasks(input) {
      await endTasks(deps.pool, input.executionId, input.ends);
    },
    async storeStartingContext(input) {
      await storeStartingContext(deps.pool, input);
    },
    /** A user resolved a verification hold (the session's `resolveHold` update): null when none was open. */
    async resolveVerificationHold(input) {
      const hold = await resolveHold(deps.pool, input);
      if (!hold) return null;
      return { holdId: hold.holdId, command: hold.command, heldAt: hold.heldAt, resolvedAt: hold.resolvedAt!, resolvedBy: hold.resolvedBy! };
    },
    async modelStep(input) {
      return modelStep(deps.pool, resolveProvider, input, { calls: deps.modelCalls, sessionHeartbeatMs: deps.sessionModelHeartbeatMs });
    },
  };
}

/** Leases are keyed by host and path: two hosts may use the same path for different worktrees. */
export const leaseKey = (hostId: string, worktree: string): string => `${hostId}:${worktree}`;

/** Activities bound to the disk that holds a worktree. They run on `orchard-host-<hostId>`. */
export function createHostActivities(deps: HostActivityDeps): HostActivities {
  // Commands start from a small helper process: a fork of the worker itself blocks its event loop (bash/spawner.ts).
  startSpawner();
  const maxOutputBytes = deps.maxOutputBytes ?? 64 * 1024;
  const commandSlots = new CommandSlots(deps.maxConcurrentCommands ?? DEFAULT_MAX_COMMANDS);
  const running = new RunningCalls();
  // A team's verify command runs like a child's command: same sandbox, same cap on this host's commands.
  const verifier: VerifierDeps = { worktreeRoot: deps.worktreeRoot, confinement: deps.confinement, slots: commandSlots };
  return {
    /**
     * Takes the worktree's lease, then creates (or re-enters) the worktree. A live holder is never joined by a
     * second agent (`worktree_held`); a holder that cannot be proven gone is refused (`worktree_liveness_unknown`).
     */
    async prepareWorktree(input) {
      // Heartbeats for the whole preparation: a dead worker is noticed within the heartbeat timeout, and a
      // cancel (the session closing while it prepares) reaches this attempt.
      const context = Context.current();
      context.heartbeat();
      const beat = setInterval(() => context.heartbeat(), 1000);
      try {
        await deps.hooks?.beforePrepare?.(input, context.cancellationSignal);
        // Cancelled before anything was taken: stop here (after the lease, the closing session releases it).
        if (context.cancellationSignal.aborted) throw new CancelledFailure('worktree preparation cancelled');
        return await prepare(input, context.cancellationSignal);
      } finally {
        clearInterval(beat);
      }
    },
    /** Before a session, orchestrator or team on this host starts: the checks its creator could not make from afar. */
    async checkRepository(input) {
      const problem = await repositoryProblem(input.repo, { baseRef: input.baseRef, sessionId: input.sessionId });
      if (problem) return { code: problem.code, message: `on host ${deps.hostId}: ${problem.message}` };
      if (input.scenario) {
        try {
          await loadScenario(input.scenario);
        } catch (err) {
          if (err instanceof ModelError) return { code: err.code, message: `on host ${deps.hostId}: ${err.message}` };
          throw err;
        }
      }
      return null;
    },
    /** Release-if-current, when the session closes: a stale holder's release changes nothing. */
    async releaseWorktree(lease) {
      return releaseLease(deps.pool, lease);
    },
    /**
     * The session is closing: releases what its chain holds on this host, also when it never learned its lease
     * (a preparation cancelled after the lease was taken). Holders are unique to one chain, so this releases
     * nothing of anyone else's; a takeover changed the holder, so a stale chain's release changes nothing.
     */
    async releaseSessionWorktree(input) {
      if (input.lease) return releaseLease(deps.pool, input.lease);
      return releaseHolder(deps.pool, deps.hostId, input.holder);
    },
    async executeTool(input) {
      return executeTool(
        {
          pool: deps.pool,
          hostId: deps.hostId,
          maxOutputBytes,
          commandSlots,
          reap: deps.reap,
          confinement: deps.confinement,
          teamLiveness: deps.teamLiveness,
          running,
          toolCancellation: deps.hooks?.toolCancellation,
        },
        input,
      );
    },
    /**
     * A cancelled session's running commands on this host, stopped at once (their tool calls end cancelled); its model
     * call, when this process runs it, asks for its cancellation at once. Elsewhere the call hears it with its next beat.
     */
    async stopCommands(input) {
      const chain = parseLeaseHolder(input.holder);
      const calls = chain ? (deps.modelCalls?.stop(modelCallKey(chain.namespace, chain.workflowId)) ?? 0) : 0;
      return running.stop(input.holder) + calls;
    },
    /** `orchard team merge` and `orchard team verify`: the team repository is on this host's disk. */
    ...withHeartbeats(createTeamHostActivities({ pool: deps.pool, verifier }), ['reverifyTeam'], abortBindingOf(deps)),
    // Settling an execution (reading the Member's head) and a Coordinator tool that may certify (building the result
    // branch, running the verify command) read and write the team's repository: they run on its host's queue, heartbeating.
    ...withHeartbeats(pickTeamGitActivities(deps, verifier), ['settleExecution', 'coordinatorTool'], abortBindingOf(deps)),
  };

  async function prepare(input: PrepareWorktreeInput, signal: AbortSignal): Promise<PreparedSessionWorktree> {
    const path = join(resolve(deps.worktreeRoot), input.sessionId);
    // Fail closed, before anything is taken: a host that cannot confine an isolated child does not start one.
    if (input.isolated && (!deps.confinement || deps.confinement.mode === 'unavailable')) {
      throw orchardFailure(
        'sandbox_unavailable',
        `host ${deps.hostId} cannot confine isolated children, so it runs none: ${deps.confinement?.reason ?? 'no confinement was resolved'}`,
      );
    }
    const outcome = await acquireLease(
      deps.pool,
      { worktree: leaseKey(deps.hostId, path), host: deps.hostId, holder: input.holder },
      {
        holderLiveness: deps.holderLiveness,
        // The holder is closed, so whatever it started is an orphan: reap it by identity (a reused pid is a
        // stranger, never a reason to refuse) and take over only if nothing of any generation is left alive.
        aliveProcesses: async (worktree) => (await reapWorktree(deps.pool, deps.hostId, worktree, deps.reap)).remaining,
      },
    );
    if (outcome.kind === 'bound') {
      throw orchardFailure(
        'worktree_held',
        `worktree ${path} is held by the live session ${outcome.holder}: no second agent on one worktree; ` +
          `route the work to it with \`session send <that session id> <task>\``,
        { holder: outcome.holder },
      );
    }
    if (outcome.kind === 'unknown') {
      throw orchardFailure('worktree_liveness_unknown', `worktree ${path} is held by ${outcome.holder} and ${outcome.reason}`, {
        holder: outcome.holder,
      });
    }
    await deps.hooks?.afterLease?.(input, signal);
    // Cancelled while the lease was being taken: the closing session releases it (by holder); create nothing.
    if (signal.aborted) throw new CancelledFailure('worktree preparation cancelled');
    try {
      const prepared = await prepareWorktree({ ...input, worktreeRoot: deps.worktreeRoot });
      if (input.isolated) {
        // The git-level backstop behind the bash guard: scripts the guard cannot see still cannot move other refs.
        await installRefBackstop(input.repo);
        await markWorktreeIsolated(prepared.worktree, prepared.branch);
      }
      // An isolated child on a host that runs with ORCHARD_SANDBOX=off: the session says so (status, search attribute).
      const unconfined = input.isolated === true && deps.confinement?.mode === 'off' ? true : undefined;
      return { ...prepared, host: deps.hostId, lease: outcome.lease, leaseOutcome: outcome.kind, unconfined };
    } catch (err) {
      await releaseLease(deps.pool, outcome.lease);
      const code = (err as { code?: unknown }).code;
      // A fault without a verdict (git answering nothing on a loaded machine, a spawn that failed) is retried as it
      // is: turned into a typed refusal it would fail the session for good.
      if (code === undefined && !(err instanceof ApplicationFailure)) throw err;
      const message = err instanceof Error ? err.message : String(err);
      throw orchardFailure(isErrorCode(code) ? code : 'worktree_create_failed', message);
    }
  }
}

/** The team activities that touch the repository, as a host serves them (the same code as on the shared queue). */
function pickTeamGitActivities(deps: HostActivityDeps, verifier: VerifierDeps) {
  const team = createTeamActivities({ ...teamDepsOf(deps), verifier });
  return { settleExecution: team.settleExecution, coordinatorTool: team.coordinatorTool };
}

type TemporalDeps = Pick<SharedActivityDeps, 'pool' | 'temporal' | 'namespace' | 'teamHooks'>;

/** The team activities, as the shared queue and a host queue both serve them. */
function teamActivitiesOf(deps: TemporalDeps) {
  return createTeamActivities(teamDepsOf(deps));
}

function teamDepsOf(deps: TemporalDeps) {
  return { pool: deps.pool, namespace: deps.namespace, hooks: deps.teamHooks, temporal: temporalOf(deps, 'team runs') };
}

function temporalOf(deps: TemporalDeps, what: string): () => TemporalPort {
  return () => {
    if (!deps.temporal) throw new Error(`this worker has no client for ${what}`);
    return deps.temporal();
  };
}

/** Binds an activity attempt's cancellation to every Temporal call its work makes through the worker's port. */
export function abortBindingOf(deps: Pick<SharedActivityDeps, 'temporal'>): AbortBinding | undefined {
  if (!deps.temporal) return undefined;
  const temporal = deps.temporal;
  return (signal, work) => {
    // The SDK adds an abort listener to the signal for every call it makes and never removes it: an activity that asks
    // Temporal more than ten times (a yield polling a session's liveness) made Node warn of a leak on every attempt.
    // The listeners go with the attempt's signal.
    setMaxListeners(0, signal);
    return temporal().withAbortSignal(signal, work);
  };
}
