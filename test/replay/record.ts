/**
 * Records a workflow's history as JSON for the replay tests:
 *   TEMPORAL_ADDRESS=… npx tsx test/replay/record.ts <workflowId> <name> [runId]
 * Keep histories that cover each code path (turns, tool calls, continue-as-new, cancel, failures).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';

async function main(): Promise<void> {
  const [workflowId, name, runId] = process.argv.slice(2);
  if (!workflowId || !name) throw new Error('usage: record.ts <workflowId> <name>');
  const connection = await Connection.connect({ address: process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233' });
  const client = new Client({ connection, namespace: process.env.TEMPORAL_NAMESPACE ?? 'default' });
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const path = join(__dirname, 'histories', `${name}.json`);
  writeFileSync(path, historyToJSON(history));
  console.log(`wrote ${path} (${history.events?.length ?? 0} events)`);
  await connection.close();
}

void main();
