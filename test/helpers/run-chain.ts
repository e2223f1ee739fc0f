import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

/** One run of a workflow's continue-as-new chain, measured from its own history. */
export interface MeasuredRun {
  readonly runId: string;
  /** `RUNNING`, `CONTINUED_AS_NEW`, `FAILED`, … as the server describes the run. */
  readonly status: string;
  readonly events: number;
  /** The history's size as encoded on the wire (protobuf), and as the server accounts it. */
  readonly encodedBytes: number;
  readonly serverBytes: number;
  /** The input this run handed to the next (its `WorkflowExecutionContinuedAsNew` event), if it continued-as-new. */
  readonly continuedAsNew?: { readonly inputBytes: number; readonly input: unknown };
  /** The encoded history as latin1 text: a search for an ASCII marker finds it in any payload. */
  readonly text: string;
}

/**
 * Every run of `workflowId`'s chain, oldest first: walked back from the current run through each run's first event
 * (`continuedExecutionRunId`), each history fetched and measured.
 */
export async function measureRunChain(client: Client, workflowId: string): Promise<MeasuredRun[]> {
  const runs: MeasuredRun[] = [];
  let runId: string | undefined = (await client.workflow.getHandle(workflowId).describe()).runId;
  while (runId) {
    const handle = client.workflow.getHandle(workflowId, runId);
    const described = await handle.describe();
    const history: temporal.api.history.v1.IHistory = await handle.fetchHistory();
    const encoded = temporal.api.history.v1.History.encode(history).finish();
    const events: temporal.api.history.v1.IHistoryEvent[] = history.events ?? [];
    const can = events.find((e) => e.workflowExecutionContinuedAsNewEventAttributes)?.workflowExecutionContinuedAsNewEventAttributes;
    let continuedAsNew: MeasuredRun['continuedAsNew'];
    if (can) {
      const payloads = can.input ?? { payloads: [] };
      const first = payloads.payloads?.[0]?.data;
      continuedAsNew = {
        inputBytes: temporal.api.common.v1.Payloads.encode(payloads).finish().length,
        input: first ? JSON.parse(Buffer.from(first).toString('utf8')) : undefined,
      };
    }
    runs.unshift({
      runId,
      status: described.status.name,
      events: events.length,
      encodedBytes: encoded.length,
      serverBytes: Number(described.raw.workflowExecutionInfo?.historySizeBytes ?? 0),
      continuedAsNew,
      text: Buffer.from(encoded).toString('latin1'),
    });
    runId = events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
  }
  return runs;
}

/** Temporal's limits per run and per payload (the server's defaults). */
export const TEMPORAL_LIMITS = { historyBytes: 50 * 1024 * 1024, historyEvents: 51_200, payloadBytes: 2 * 1024 * 1024 } as const;

export const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

/** An integer of at least `minimum` from the environment, or `fallback`. */
export function knob(name: string, fallback: number, minimum = 1): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < minimum) throw new Error(`${name} must be an integer of at least ${minimum}, not ${raw}`);
  return value;
}
