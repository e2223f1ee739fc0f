import { describeConfinement, resolveConfinement, type Confinement } from '../activities/bash/confinement';
import { NativeConnection, Runtime, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import type { Pool } from 'pg';
import { createHostActivities, createSharedActivities, type HostActivityHooks } from '../activities';
import type { TeamActivityHooks } from '../activities/team';
import type { ModelProvider } from '../activities/model/types';
import { describeSweep, sweepHost, type ReapOptions } from '../activities/bash/reaper';
import { RunningCalls } from '../activities/tools/running-calls';
import { hostTaskQueue } from '../contract/messages';
import { defaultBudgetFromEnv, limitsFromEnv } from '../activities/limits';
import { DEFAULT_SHUTDOWN_GRACE_SECONDS } from './config';
import { holderLivenessFrom } from './holder-liveness';
import { OrchardClient } from '../client/client';

export interface OrchardWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  /** Shared queue: workflows and the activities that need no particular host. */
  taskQueue: string;
  hostId: string;
  worktreeRoot: string;
  pool: Pool;
  /** Asked whether a worktree lease's holder still runs before anyone takes the lease over. */
  client: Client;
  defaultProvider?: ModelProvider;
  /**
   * A prebuilt bundle (tests bundle once per run); otherwise the workflows are bundled at start. It must have been
   * built with `dataConverter`'s failure converter (bundleWorkflows does): the Worker does not add it to a bundle.
   */
  workflowBundle?: { codePath: string } | WorkflowBundleWithSourceMap;
  /** Run only the host queue (a host that holds worktrees but runs no workflows). */
  hostOnly?: boolean;
  /** Bytes of command output a tool result keeps. */
  maxOutputBytes?: number;
  /** Test hooks that widen race windows in host activities (never set in production). */
  hostHooks?: HostActivityHooks;
  /** Test hooks that widen race windows in team activities (never set in production). */
  teamHooks?: TeamActivityHooks;
  /** Where session defaults are read from when a session starts (process.env by default). */
  env?: NodeJS.ProcessEnv;
  /** At most this many commands run at once on this host (ORCHARD_MAX_COMMANDS; 4 when unset). */
  maxConcurrentCommands?: number;
  /** At most this many activities run at once in each worker (ORCHARD_MAX_ACTIVITIES; the SDK's default when unset). */
  maxConcurrentActivities?: number;
  /** How recorded processes of dead workers are torn down (tests inject a signal sender that cannot kill). */
  reap?: ReapOptions;
  /** Where the start-up sweep's summary line goes; the SDK logger when unset. */
  log?: (line: string) => void;
  /**
   * After shutdown(): how long running activities may take to finish before the SDK cancels them. Default: the
   * production default (ORCHARD_SHUTDOWN_GRACE_SECONDS' 600 s); tests pass a short one.
   */
  shutdownGraceMs?: number;
  /**
   * After shutdown(): how long the whole shutdown may take before the worker stops waiting for activities that
   * ignore their cancellation (its run() then rejects). Default: no bound (a process manager's kill is the bound);
   * tests pass one so that a hang is a failure, not a stalled run.
   */
  shutdownForceMs?: number;
  /**
   * How isolated children are confined on this host. Default: resolved from ORCHARD_SANDBOX (of `env`) and a probe
   * of bubblewrap, once per worker (resolveConfinement).
   */
  confinement?: Confinement;
  /**
   * Payload and failure encryption (client/connection.ts dataConverterFromEnv); the same one the client uses. Default:
   * none.
   */
  dataConverter?: DataConverter;
  /** How often a session's model call heartbeats (10 s by default); a test stretches it to show a cancel does not wait for it. */
  sessionModelHeartbeatMs?: number;
}

export interface OrchardWorkers {
  hostQueue: string;
  /** How this host confines isolated children. */
  confinement: Confinement;
  /** Resolves when both workers have stopped. */
  run(): Promise<void>;
  shutdown(): void;
}

/**
 * Cancellation reaches an activity only through heartbeats, and the TS worker throttles them to 0.8 ×
 * heartbeatTimeout (up to 60 s) by default: one second keeps a cancel (or a handoff) within seconds.
 */
const HEARTBEAT_THROTTLE = '1 second';

/**
 * The workflow code, bundled with the data converter's failure converter: workflow code runs in an isolate that
 * takes its failure converter from the bundle, never from the Worker's options (with encryption on, an update's
 * refusal or a workflow's failure would otherwise reach history in plaintext).
 */
export async function bundleWorkflows(dataConverter?: DataConverter): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    failureConverterPath: dataConverter?.failureConverterPath,
    logger: quietBundlerLogger,
  });
}

/** Two workers in one process: the shared queue (workflows, model, store) and this host's queue (worktrees). */
export async function createOrchardWorkers(options: OrchardWorkerOptions): Promise<OrchardWorkers> {
  const hostQueue = hostTaskQueue(options.hostId);
  // Session defaults from the environment are read when sessions start; a bad value stops the worker here, at once.
  limitsFromEnv(options.env ?? process.env);
  defaultBudgetFromEnv(options.env ?? process.env);
  // A worker that died (kill -9, OOM) left its commands running in their worktrees: reap them before this host
  // takes any work. Groups that cannot be verified dead stay open and keep their worktrees blocked.
  const sweep = await sweepHost(options.pool, options.hostId, options.reap);
  const summary = describeSweep(options.hostId, sweep);
  if (options.log) options.log(summary);
  else if (sweep.killed.length > 0 || !sweep.verified) Runtime.instance().logger.warn(summary);
  else Runtime.instance().logger.info(summary);
  const confinement = options.confinement ?? (await resolveConfinement(options.env ?? process.env));
  const confinementLine = `host ${options.hostId}: ${describeConfinement(confinement)}`;
  if (options.log) options.log(confinementLine);
  else if (confinement.mode === 'sandbox') Runtime.instance().logger.info(confinementLine);
  else Runtime.instance().logger.warn(confinementLine);
  const shutdownGraceTime = options.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_SECONDS * 1000;
  const shutdownForceTime = options.shutdownForceMs;
  const activityLimit = options.maxConcurrentActivities ? { maxConcurrentActivityTaskExecutions: options.maxConcurrentActivities } : {};
  // One client for the activities that ask Temporal about sessions and teams (liveness, cancels, sends).
  const orchard = new OrchardClient(options.client, { taskQueue: options.taskQueue, defaultHost: options.hostId });
  // The model calls this process runs: a cancelled session's stop (a host activity) pokes its own, so the cancel does
  // not wait for the call's next heartbeat.
  const modelCalls = new RunningCalls();
  const hostWorker = await Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: hostQueue,
    identity: `orchard-host@${options.hostId}`,
    dataConverter: options.dataConverter,
    activities: createHostActivities({
      pool: options.pool,
      hostId: options.hostId,
      worktreeRoot: options.worktreeRoot,
      maxOutputBytes: options.maxOutputBytes,
      holderLiveness: holderLivenessFrom(options.client),
      teamLiveness: (teamId) => orchard.teamLiveness(teamId),
      hooks: options.hostHooks,
      maxConcurrentCommands: options.maxConcurrentCommands,
      reap: options.reap,
      confinement,
      temporal: () => orchard,
      namespace: options.namespace,
      teamHooks: options.teamHooks,
      modelCalls,
    }),
    maxHeartbeatThrottleInterval: HEARTBEAT_THROTTLE,
    defaultHeartbeatThrottleInterval: HEARTBEAT_THROTTLE,
    ...activityLimit,
    shutdownGraceTime,
    shutdownForceTime,
  });
  const workers: Worker[] = [hostWorker];
  if (!options.hostOnly) {
    workers.push(
      await Worker.create({
        connection: options.connection,
        namespace: options.namespace,
        taskQueue: options.taskQueue,
        identity: `orchard@${options.hostId}`,
        dataConverter: options.dataConverter,
        workflowBundle: options.workflowBundle ?? (await bundleWorkflows(options.dataConverter)),
        activities: createSharedActivities({
          pool: options.pool,
          defaultProvider: options.defaultProvider,
          env: options.env,
          namespace: options.namespace,
          teamHooks: options.teamHooks,
          temporal: () => orchard,
          modelCalls,
          sessionModelHeartbeatMs: options.sessionModelHeartbeatMs,
        }),
        maxHeartbeatThrottleInterval: HEARTBEAT_THROTTLE,
        defaultHeartbeatThrottleInterval: HEARTBEAT_THROTTLE,
        ...activityLimit,
        shutdownGraceTime,
        shutdownForceTime,
      }),
    );
  }
  return {
    hostQueue,
    confinement,
    run: async () => {
      await Promise.all(workers.map((w) => w.run()));
    },
    shutdown: () => {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
    },
  };
}

const quietBundlerLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: (message: string, meta?: unknown) => console.warn(message, meta ?? ''),
  error: (message: string, meta?: unknown) => console.error(message, meta ?? ''),
};
