import { Context } from '@temporalio/activity';
import { CancelledFailure } from '@temporalio/common';
import type { Pool } from 'pg';
import { orchardFailure } from '../../workflows/errors';
import { TOOL_PROFILES, type ToolProfile } from '../../workflows/tools';
import { claimDispatch, markUnknown, settleDispatch, type DispatchKey, type ToolOutput } from '../store/dispatch';
import { endProcessGroup, leaseIsCurrent, recordProcessGroup, renewLease, type Lease } from '../store/leases';
import type { CommandSlots } from '../bash/command-slots';
import { liveGroupsBlocking, reapCall, type ReapOptions } from '../bash/reaper';
import { appendEntry, findAssistantMessage } from '../store/transcript';
import { isExecutableTool, refusal, runTool } from './run-tool';

export interface ExecuteToolInput {
  sessionId: string;
  turn: number;
  step: number;
  callId: string;
  /** Position of the call in the assistant message: fixes the tool result's place in the transcript. */
  index: number;
  profile: ToolProfile;
  worktree: string;
  branch: string;
  bashTimeoutSeconds: number;
  /** The session's worktree lease: revalidated immediately before every side effect. */
  lease: Lease;
  /** A child created by an orchestrator: its bash may only touch its own branch (guard + backstop). */
  isolated?: boolean;
}

export interface ExecuteToolResult {
  tool: string;
  /** settled: ran now; already-settled: an earlier attempt ran it; unknown: claimed earlier, never settled. */
  outcome: 'settled' | 'already-settled' | 'unknown';
  ok: boolean;
}

export interface ExecutorDeps {
  pool: Pool;
  hostId: string;
  maxOutputBytes: number;
  /** The host's command cap (ORCHARD_MAX_COMMANDS). */
  commandSlots?: CommandSlots;
  /** How a dead attempt's processes are reaped (tests inject a signal sender that cannot kill). */
  reap?: ReapOptions;
}

/** How often a running command renews its lease; a failed renewal (the lease moved) stops the command. */
const RENEW_EVERY_MS = 5000;

const UNKNOWN_OUTCOME =
  'outcome unknown: an earlier attempt started this tool call and did not record a result (the worker stopped). ' +
  'It may or may not have taken effect; check the state of the worktree before repeating it.';

const unknownAndBlocked = (pids: number[]) =>
  `${UNKNOWN_OUTCOME} Its processes could not be verified stopped (pids ${pids.join(', ')} are still alive), so ` +
  'the worktree is blocked: changes to it are refused until they are gone.';

/**
 * Runs one tool call of a model step at most once (invariant 11a). The call's name and arguments are read
 * from the transcript, where the model step stored them, so workflow history carries only ids.
 */
export async function executeTool(deps: ExecutorDeps, input: ExecuteToolInput): Promise<ExecuteToolResult> {
  const { pool } = deps;
  const assistant = await findAssistantMessage(pool, input.sessionId, input.turn, input.step);
  const call = assistant?.tool_calls?.find((c) => c.id === input.callId);
  if (!call) {
    throw orchardFailure('invalid_input', `no tool call ${input.callId} in turn ${input.turn} step ${input.step}`);
  }
  const tool = call.function.name;
  // A stale holder (the lease moved to a new generation) is refused before anything is written.
  if (!(await leaseIsCurrent(pool, input.lease))) throw staleLease(input.lease);
  const key: DispatchKey = { sessionId: input.sessionId, turn: input.turn, step: input.step, callId: input.callId };
  const claim = await claimDispatch(pool, key, tool, deps.hostId);
  const callKey = `${input.sessionId}/${input.turn}/${input.step}/${input.callId}`;

  let output: ToolOutput;
  let outcome: ExecuteToolResult['outcome'];
  let cancelled = false;
  let leaseLost = false;
  if (claim.kind === 'settled') {
    output = claim.output;
    outcome = 'already-settled';
  } else if (claim.kind === 'unknown') {
    // The earlier attempt's command may outlive its dead worker: stop it before the model hears anything.
    const reaped = await reapCall(pool, deps.hostId, callKey, { ...deps.reap, heartbeat: () => Context.current().heartbeat() });
    await markUnknown(pool, key);
    output = { ok: false, content: reaped.verified ? UNKNOWN_OUTCOME : unknownAndBlocked(reaped.remaining), durationMs: 0 };
    outcome = 'unknown';
  } else {
    const offered = TOOL_PROFILES[input.profile].some((d) => d.name === tool);
    const context = Context.current();
    // The command stops when the activity is cancelled or when the lease is found to have moved.
    const lost = new AbortController();
    let lastRenewal = Date.now();
    const result =
      offered && isExecutableTool(tool)
        ? await runTool(tool, call.function.arguments, {
            sessionId: input.sessionId,
            worktree: input.worktree,
            branch: input.branch,
            isolated: input.isolated === true,
            bashTimeoutMs: input.bashTimeoutSeconds * 1000,
            maxOutputBytes: deps.maxOutputBytes,
            commandSlots: deps.commandSlots,
            signal: AbortSignal.any([context.cancellationSignal, lost.signal]),
            onTick: () => {
              context.heartbeat();
              if (Date.now() - lastRenewal < RENEW_EVERY_MS) return;
              lastRenewal = Date.now();
              void renewLease(pool, input.lease).then((current) => {
                if (!current) {
                  leaseLost = true;
                  lost.abort();
                }
              }, () => undefined);
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
            onGroupGone: (pgid) => endProcessGroup(pool, input.lease, pgid, callKey),
          })
        : refusal('tool_unknown', `there is no tool named ${tool}; use one of the tools you were given`);
    cancelled = result.cancelled === true && !leaseLost;
    output = result;
    await settleDispatch(pool, key, tool, output);
    outcome = 'settled';
  }
  await appendEntry(
    pool,
    { sessionId: input.sessionId, turn: input.turn, step: input.step, ordinal: input.index + 1 },
    { role: 'tool', tool_call_id: input.callId, content: output.content },
  );
  // The command was stopped and recorded; report the cancellation so the workflow sees the activity end as cancelled.
  if (cancelled) throw new CancelledFailure('tool call cancelled; its process group was stopped');
  if (leaseLost) throw staleLease(input.lease);
  return { tool, outcome, ok: output.ok };
}

function staleLease(lease: Lease) {
  return orchardFailure(
    'lease_stale',
    `the lease on ${lease.worktree} is no longer held by ${lease.holder} at generation ${lease.generation}: ` +
      'another execution owns this worktree now, so this call changed nothing',
  );
}
