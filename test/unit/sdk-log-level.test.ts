import { ActivityFailure, ApplicationFailure, RetryState } from '@temporalio/common';
import test from 'ava';
import { sdkLogLevel } from '../../worker/logging';

test('a typed, final refusal is logged at info; a retried or unknown failure stays a warning', (t) => {
  const refusal = ApplicationFailure.create({ type: 'repository_not_found', message: '/nope is not a directory', nonRetryable: true });
  t.is(sdkLogLevel('WARN', 'Activity failed', { error: refusal }), 'INFO');
  // The workflow failed because its activity refused: the refusal is the cause.
  const wrapped = new ActivityFailure('activity failed', 'prepareWorktree', '1', RetryState.NON_RETRYABLE_FAILURE, undefined, refusal);
  t.is(sdkLogLevel('WARN', 'Workflow failed', { error: wrapped }), 'INFO');
  // A refusal as a workflow's log carries it: copied out of the isolate, a plain object of the same shape.
  t.is(sdkLogLevel('WARN', 'Workflow failed', { error: { name: 'ApplicationFailure', type: 'scenario_exhausted', nonRetryable: true } }), 'INFO');

  const retried = ApplicationFailure.create({ type: 'store_unavailable', message: 'connection refused', nonRetryable: false });
  t.is(sdkLogLevel('WARN', 'Activity failed', { error: retried }), 'WARN');
  const foreign = ApplicationFailure.create({ type: 'SomethingElse', message: 'x', nonRetryable: true });
  t.is(sdkLogLevel('WARN', 'Activity failed', { error: foreign }), 'WARN');
  t.is(sdkLogLevel('WARN', 'Activity failed', { error: new Error('boom') }), 'WARN');
  t.is(sdkLogLevel('ERROR', 'Activity failed', { error: refusal }), 'ERROR');
  t.is(sdkLogLevel('WARN', 'No workflows registered, not polling for workflow tasks'), 'DEBUG');
});
