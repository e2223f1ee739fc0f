import { legacySessionBranch, migrateSessionBranch } from '../bash/sandbox';
import { sessionBranch } from '../../contract/ids';
import { holdWorktree, openHold } from '../store/holds';
import type { Confinement } from '../bash/confinement';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { Pool } from 'pg';
import { orchardFailure } from '../../contract/failures';
import { TOOL_PROFILES } from '../../workflows/tools';
import { claimDispatch, markUnknown, settleDispatch, storeOutput, type DispatchKey, type ToolOutput } from '../store/dispatch';
import { turnKeyOf } from '../store/keys';
import { endProcessGroup, leaseIsCurrent, recordProcessGroup, renewLease } from '../store/leases';
import { untilStored } from '../store/db';
import type { CommandSlots } from '../bash/command-slots';
import { liveGroupsBlocking, reapCall, type ReapOptions } from '../bash/reaper';
import { UNKNOWN_OUTCOME, appendEntry, findAssistantMessage, findToolResult } from '../store/transcript';
import { isExecutableTool, isMutatingTool, refusal, runTool } from './run-tool';
import { sendMemberMessage } from './member-message';
import type { SessionLiveness } from '../../contract/temporal-port';
import type { ExecuteToolInput, ExecuteToolResult, Lease } from '../../contract/activities';
import { metrics } from '../metrics';
import type { RunningCalls } from './running-calls';

export interface ExecutorDeps {
  pool: Pool;
  hostId: string;
  maxOutputBytes: number;
  /** The host's command cap (ORCHARD_MAX_COMMANDS). */
  commandSlots?: CommandSlots;
  /** How a dead attempt's processes are reaped (tests inject a signal sender that cannot kill). */
  reap?: ReapOptions;
  /** How this host confines isolated children (resolved when the worker starts). */
  confinement?: Confinement;
  /** Whether a team's run is running; without it, a Member's message is refused (nobody can tell). */
  teamLiveness?: (teamId: string) => Promise<SessionLiveness>;
  /** This host's running calls, which a cancelled session stops at once (`stopCommands`). */
  running?: RunningCalls;
  /** Test hook (HostActivityHooks.toolCancellation): the activity's cancellation as the command takes it. */
  toolCancellation?: (activity: AbortSignal) => AbortSignal;
}

/** How often a running command renews its lease; a failed renewal (the lease moved) stops the command. */
const RENEW_EVERY_MS = 5000;

/**
 * How often a running command whose output has not changed heartbeats (each one is a request the Temporal server
 * persists: a hundred quiet commands beating every second kept a quarter of this 2-core machine busy). Output that
 * changed is beaten at once (the Web UI shows its tail); well inside the tool activity's 15 s heartbeat timeout, so a
 * dead worker is still noticed in seconds. A cancel reaches the command directly (`stopCommands`), not by the beat.
 */
const QUIET_HEARTBEAT_MS = 5000;

const INTERRUPTED =
  'interrupted: the worker running this command was shut down before it finished, and the command was stopped. ' +
  'It may or may not have taken effect; check the state of the worktree before repeating it.';

const unknownAndBlocked = (pids: number[]) =>
  `${UNKNOWN_OUTCOME} Its processes could not be verified stopped (pids ${pids.join(', ')} are still alive), so ` +
  'the worktree is blocked: changes to it are refused until they are gone.';

/**
 * Runs one tool call of a model step. A mutating tool runs at most once (invariant 11a): its claim is recorded
 * before it starts, a retry that finds the result returns it, and one that finds only the claim reports the
 * outcome as unknown. Read-only tools change nothing, so a retry runs them again. The call's name and arguments
 * are read from the transcript, where the model step stored them, so workflow history carries only ids.
 */
export async function executeTool(deps: ExecutorDeps, given: ExecuteToolInput): Promise<ExecuteToolResult> {
  // A session that started before the confined layout still names `orchard/<id>`: its branch moves to
  // `orchard/<id>/work` first (idempotent), and the workflow learns the new name from the result.
  let migratedTo: string | undefined;
  if (given.branch === legacySessionBranch(given.sessionId)) {
    await migrateSessionBranch(given.worktree, given.sessionId);
    migratedTo = sessionBranch(given.sessionId);
  }
  const input: ExecuteToolInput = migratedTo ? { ...given, branch: migratedTo } : given;
  const withBranch = <T extends ExecuteToolResult>(result: T): T => (migratedTo ? { ...result, branch: migratedTo } : result);
  return withBranch(await execute(deps, input));
}

async function execute(deps: ExecutorDeps, input: ExecuteToolInput): Promise<ExecuteToolResult> {
  const { pool } = deps;
  const turnKey = turnKeyOf(input);
  const assistant = await findAssistantMessage(pool, turnKey.turnId, input.step);
  const call = assistant?.tool_calls?.find((c) => c.id === input.callId);
  if (!call) {
    throw orchardFailure('invalid_input', `no tool call ${input.callId} in turn ${input.turn} step ${input.step}`);
  }
  const tool = call.function.name;
  // A stale holder (the lease moved to a new generation) is refused before anything is written.
  if (!(await leaseIsCurrent(pool, input.lease))) throw staleLease(input.lease);
  const key: DispatchKey = { ...turnKey, step: input.step, callId: input.callId };
  const callKey = `${turnKey.turnId}/${input.step}/${input.callId}`;
  const record = (content: string) =>
    appendEntry(pool, { ...turnKey, step: input.step, ordinal: input.index + 1 }, { role: 'tool', tool_call_id: input.callId, content });

  if (tool === 'org_send_message' && input.profile === 'member' && input.team) {
    // Idempotent by its message id (the call's key): a retry finds the accepted message, or is refused again.
    const sent = await sendMemberMessage(
      pool,
      { team: input.team, sessionId: input.sessionId, messageId: `${input.sessionId}/${callKey}`, rawArguments: call.function.arguments },
      deps.teamLiveness,
      (code) => metrics.toolRefused(input.profile, code),
    );
    await record(sent.output.content);
    return { tool, outcome: 'settled', ok: sent.output.ok, message: sent.message };
  }

  if (!isMutatingTool(tool)) {
    const result = await run(deps, input, tool, call.function.arguments, callKey);
    await storeOutput(pool, key, tool, result.output);
    await record(result.output.content);
    return { tool, outcome: 'settled', ok: result.output.ok };
  }

  const claim = await claimDispatch(pool, key, tool, deps.hostId);
  if (claim.kind === 'settled') {
    await record(claim.output.content);
    return { tool, outcome: 'already-settled', ok: claim.output.ok };
  }
  if (claim.kind === 'unknown') {
    // Declared unknown first, so an earlier attempt that is still alive cannot settle it afterwards; then its
    // command (which may outlive a dead worker) is stopped before the model hears anything.
    await markUnknown(pool, key, 'a retried attempt found the claim without a result');
    const reaped = await reapCall(pool, deps.hostId, callKey, { ...deps.reap, heartbeat: () => Context.current().heartbeat() });
    await record(reaped.verified ? UNKNOWN_OUTCOME : unknownAndBlocked(reaped.remaining));
    return { tool, outcome: 'unknown', ok: false };
  }
  const result = await run(deps, input, tool, call.function.arguments, callKey);
  const shutdown = result.stoppedBy === 'worker_shutdown';
  if (shutdown) {
    // The worker is going away mid-command: the claim says `unknown` and the next attempt (on another worker)
    // tells the model so. Nothing is recorded as a result of this attempt.
    await markUnknown(pool, key, 'the worker shut down while the command ran; it was stopped');
    await storeOutput(pool, key, tool, { ...result.output, content: `${INTERRUPTED}\n${result.output.content}` });
    throw ApplicationFailure.retryable('the worker shut down mid-command; the claim is recorded as unknown', 'worker_shutdown');
  }
  const { settled } = await settleDispatch(pool, key, tool, result.output);
  // Another attempt declared this claim unknown while this one ran: the transcript keeps what the model was told.
  await record(settled ? result.output.content : ((await findToolResult(pool, key.turnId, key.step, key.callId)) ?? UNKNOWN_OUTCOME));
  // The command was stopped and recorded; report the cancellation so the workflow sees the activity end as cancelled.
  // Stopped by its session before the cancellation reached this attempt (stopCommands): the SDK reports a
  // CancelledFailure as cancelled only once the cancellation has arrived, so the call answers its recorded result
  // instead; the session's turn, cancelled already, ends at its next step.
  if (result.stoppedBy === 'cancel' && Context.current().cancellationSignal.aborted)
    throw new CancelledFailure('tool call cancelled; its process group was stopped');
  if (result.stoppedBy === 'lease_lost') throw staleLease(input.lease);
  return { tool, outcome: settled ? 'settled' : 'unknown', ok: settled && result.output.ok, ...(result.held ? { held: true } : {}) };
}

interface RunOutcome {
  output: ToolOutput;
  /** Why a running command was stopped before it ended on its own. */
  stoppedBy?: 'cancel' | 'lease_lost' | 'worker_shutdown';
  /** Verification found a change: the worktree is held (the output says what changed). */
  held?: boolean;
}

async function run(deps: ExecutorDeps, input: ExecuteToolInput, tool: string, args: string, callKey: string): Promise<RunOutcome> {
  const { pool } = deps;
  const offered = TOOL_PROFILES[input.profile].some((d) => d.name === tool);
  if (!offered || !isExecutableTool(tool)) {
    metrics.toolRefused(input.profile, 'tool_unknown');
    return { output: refusal('tool_unknown', `there is no tool named ${tool}; use one of the tools you were given`) };
  }
  const context = Context.current();
  // The command stops when the activity is cancelled or when the lease is found to have moved.
  const lost = new AbortController();
  let leaseLost = false;
  let lastRenewal = Date.now();
  let lastBeat: { at: number; shown: string } | undefined;
  // …and when its session, being cancelled, stops it directly (the cancellation itself arrives with a heartbeat).
  const stop = deps.running?.enter(input.lease.holder);
  const result = await runTool(tool, args, {
    sessionId: input.sessionId,
    worktree: input.worktree,
    branch: input.branch,
    isolated: input.isolated === true,
    confinement: deps.confinement,
    // Keyed like the lease (`<host>:<path>`): a hold belongs to the worktree, whichever session holds it next.
    holds: {
      open: () => openHold(pool, input.lease.worktree),
      hold: async (command, changes) => {
        const hold = await holdWorktree(pool, { worktree: input.lease.worktree, sessionId: input.sessionId, command, changes });
        metrics.verificationHeld();
        return hold;
      },
    },
    onRefused: (reason) => metrics.toolRefused(input.profile, reason),
    bashTimeoutMs: input.bashTimeoutSeconds * 1000,
    maxOutputBytes: deps.maxOutputBytes,
    commandSlots: deps.commandSlots,
    signal: AbortSignal.any([deps.toolCancellation?.(context.cancellationSignal) ?? context.cancellationSignal, lost.signal, ...(stop ? [stop.signal] : [])]),
    onTick: (progress) => {
      const shown = progress ? `${progress.tool}\0${progress.command}\0${progress.outputTail}` : '';
      if (!lastBeat || lastBeat.shown !== shown || Date.now() - lastBeat.at >= QUIET_HEARTBEAT_MS) {
        context.heartbeat(progress);
        lastBeat = { at: Date.now(), shown };
      }
      if (Date.now() - lastRenewal < RENEW_EVERY_MS) return;
      lastRenewal = Date.now();
      const renewal = metrics.withStoreOrigin('lease_renewal', () => renewLease(pool, input.lease));
      void renewal.then(
        (current) => {
          if (!current) {
            leaseLost = true;
            lost.abort();
          }
        },
        () => undefined,
      );
    },
    beforeSideEffect: async () => {
      if (!(await leaseIsCurrent(pool, input.lease))) {
        leaseLost = true;
        throw staleLease(input.lease);
      }
      // Nothing changes a worktree in which a recorded process may still live (reaped here if it can be).
      const blocked = await liveGroupsBlocking(pool, deps.hostId, input.lease.worktree, undefined, {
        ...deps.reap,
        heartbeat: () => context.heartbeat(),
      });
      if (blocked) throw orchardFailure('worktree_processes_alive', blocked);
    },
    onSpawn: (info) => recordProcessGroup(pool, input.lease, deps.hostId, info, callKey),
    // The group is verified gone: that fact is written even across a database outage (no later attempt would learn
    // it, and a handoff's release waits for it) — unless this worker is shutting down: then the row stays, and the
    // next check on this host (the reaper) verifies the group gone itself.
    onGroupGone: (pgid) =>
      untilStored(() => endProcessGroup(pool, input.lease, pgid, callKey), {
        onWait: () => context.heartbeat(),
        giveUp: () => context.cancellationDetails?.workerShutdown === true,
      }),
  }).finally(() => stop?.done());
  const stoppedBy = !result.cancelled
    ? leaseLost
      ? 'lease_lost'
      : undefined
    : leaseLost
      ? 'lease_lost'
      : context.cancellationDetails?.workerShutdown
        ? 'worker_shutdown'
        : 'cancel';
  return { output: result, stoppedBy, held: result.changes !== undefined };
}

function staleLease(lease: Lease) {
  return orchardFailure(
    'lease_stale',
    `the lease on ${lease.worktree} is no longer held by ${lease.holder} at generation ${lease.generation}: ` +
      'another execution owns this worktree now, so this call changed nothing',
  );
}
