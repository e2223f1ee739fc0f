import { Client, Connection } from '@temporalio/client';
import test from 'ava';
import { holderLivenessFrom } from '../../worker/holder-liveness';
import { leaseHolder } from '../../contract/ids';
import { testStackEnv, uniqueId } from '../helpers/orchard';

test("holder liveness answers for its own namespace only: another namespace's holder is unknown", async (t) => {
  const { temporalAddress, namespace } = testStackEnv();
  const connection = await Connection.connect({ address: temporalAddress });
  t.teardown(() => connection.close());
  const client = new Client({ connection, namespace });
  // A running chain (nobody polls its queue, so it simply stays running).
  const workflowId = `session/${uniqueId('liveness')}`;
  const handle = await client.workflow.start('childSession', { workflowId, taskQueue: uniqueId('idle'), args: [] });
  t.teardown(() => handle.terminate('test over').catch(() => undefined));
  const runId = handle.firstExecutionRunId;
  const liveness = holderLivenessFrom(client);

  t.is(await liveness(leaseHolder(workflowId, runId, namespace)), 'running');
  t.is(await liveness(leaseHolder(workflowId, 'another-chain', namespace)), 'closed');
  // The same workflow id and run in another namespace is not this chain: this worker cannot tell, so unknown.
  t.is(await liveness(leaseHolder(workflowId, runId, `${namespace}-elsewhere`)), 'unknown');
  if (namespace === 'default') t.is(await liveness(leaseHolder(workflowId, runId)), 'running', 'an old holder is namespace default');
});
