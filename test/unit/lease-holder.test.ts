import test from 'ava';
import { leaseHolder, parseLeaseHolder } from '../../contract/ids';

test('a lease holder names namespace, workflow id and first run id, and parses back', (t) => {
  const holder = leaseHolder('session/pr-1741', '01a2-run', 'agents.prod');
  t.is(holder, 'agents.prod/session/pr-1741@01a2-run');
  t.deepEqual(parseLeaseHolder(holder), { namespace: 'agents.prod', workflowId: 'session/pr-1741', firstRunId: '01a2-run' });
  t.deepEqual(parseLeaseHolder(leaseHolder('session/x', 'r', 'default')), { namespace: 'default', workflowId: 'session/x', firstRunId: 'r' });
});

test('holders written before namespaces were recorded parse as namespace default', (t) => {
  t.deepEqual(parseLeaseHolder('session/pr-1741@01a2-run'), { namespace: 'default', workflowId: 'session/pr-1741', firstRunId: '01a2-run' });
  // Without a namespace argument, leaseHolder still writes that form (a workflow not yet patched to pass one).
  t.is(leaseHolder('session/s1', 'r1'), 'session/s1@r1');
});

test('a namespace named like a workflow kind is still a namespace', (t) => {
  t.deepEqual(parseLeaseHolder('session/session/s1@r1'), { namespace: 'session', workflowId: 'session/s1', firstRunId: 'r1' });
});

test('malformed holders do not parse', (t) => {
  for (const bad of ['', 'session/s1', '@r1', 'session/s1@', '/session/s1@r1', 'ns//s1@r1', 'ns/session/@r1']) {
    t.is(parseLeaseHolder(bad), undefined, bad);
  }
});
