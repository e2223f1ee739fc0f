import type { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { uniqueId } from './orchard';

/**
 * Registers a new namespace on the test run's server (none of Orchard's search attributes in it) and waits until
 * the server answers for it.
 */
export async function createBareNamespace(connection: Connection, prefix = 'bare'): Promise<string> {
  const namespace = uniqueId(prefix);
  await connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('1 day') });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await connection.operatorService.listSearchAttributes({ namespace });
      return namespace;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}
