import { patched } from '@temporalio/workflow';

/**
 * The patches of a workflow type, taken as one by the runs that begin on code that knows `epoch`: such a run records
 * one patch marker for all of them, where it recorded one for each patch it met (and the SDK upserts the
 * `TemporalChangeVersion` search attribute beside every marker: a second event, and a write of the visibility store).
 * A session's run met six or seven of them; at a hundred handoffs at once they were a tenth of the histories' events.
 *
 * A run recorded before the epoch has no epoch marker, so it asks each patch as it did and replays as recorded. Call it
 * first thing in the workflow function (its first workflow task); patches added after the epoch are asked with
 * `patched` as usual.
 */
export function patchEpoch(epoch: string): (patchId: string) => boolean {
  const all = patched(epoch);
  return (patchId) => all || patched(patchId);
}
