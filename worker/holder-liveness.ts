import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { HolderLiveness } from '../activities/store/leases';
import { parseLeaseHolder } from '../contract/ids';

/**
 * Temporal is the authority on whether a holder still runs: the chain is running when the workflow id's
 * current run is running and belongs to that chain. A lookup that fails (the cluster unreachable) is `unknown`,
 * and so is a holder of another namespace than the client's: this worker cannot see that chain, and the same
 * workflow id here would be another workflow.
 */
export function holderLivenessFrom(client: Client): (holder: string) => Promise<HolderLiveness> {
  return async (holder) => {
    const parsed = parseLeaseHolder(holder);
    if (!parsed || parsed.namespace !== client.options.namespace) return 'unknown';
    const { workflowId, firstRunId } = parsed;
    try {
      const description = await client.workflow.getHandle(workflowId).describe();
      const chain = description.raw.workflowExecutionInfo?.firstRunId;
      if (description.status.name !== 'RUNNING') return 'closed';
      if (!chain) return 'unknown';
      return chain === firstRunId ? 'running' : 'closed';
    } catch (err) {
      // Gone from visibility (never ran here, or past retention): nothing of it can still be running.
      if (err instanceof WorkflowNotFoundError) return 'closed';
      return 'unknown';
    }
  };
}
