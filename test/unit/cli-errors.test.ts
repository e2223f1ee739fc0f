import { ServiceError } from '@temporalio/client';
import { NamespaceNotFoundError } from '@temporalio/common';
import test from 'ava';
import { describeCliError } from '../../cli/errors';
import { OrchardError } from '../../client/client';
import { ConfigError } from '../../worker/config';

/** A gRPC error as @grpc/grpc-js produces it, wrapped the way the Temporal client wraps it. */
function serviceError(code: number, details: string): ServiceError {
  const grpc = Object.assign(new Error(`${code} ${details}`), { code, details });
  return new ServiceError('Failed to query Workflow', { cause: grpc });
}

const context = { address: 'temporal.prod:7233', namespace: 'agents', taskQueue: 'orchard' };

test('typed Orchard errors pass through with exit 2', (t) => {
  t.deepEqual(describeCliError(new OrchardError('session_not_found', 'no session x'), context), {
    code: 'session_not_found',
    message: 'no session x',
    exitCode: 2,
  });
  t.like(describeCliError(new ConfigError('ORCHARD_X must be …')), { code: 'invalid_input', exitCode: 2 });
});

test('Temporal status codes become codes that say what to do', (t) => {
  t.like(describeCliError(serviceError(14, 'UNAVAILABLE: No connection established'), context), {
    code: 'temporal_unavailable',
    exitCode: 2,
  });
  t.like(describeCliError(serviceError(4, 'DEADLINE_EXCEEDED: query timed out before a worker could process it'), context), {
    code: 'worker_unavailable',
  });
  const timeout = describeCliError(serviceError(4, 'DEADLINE_EXCEEDED: Deadline exceeded'), context);
  t.like(timeout, { code: 'temporal_timeout', exitCode: 2 });
  t.regex(timeout.message, /temporal\.prod:7233/);
  const auth = describeCliError(serviceError(16, 'UNAUTHENTICATED: bad key'), context);
  t.like(auth, { code: 'temporal_auth_failed', exitCode: 2 });
  t.regex(auth.message, /TEMPORAL_API_KEY/);
  t.like(describeCliError(serviceError(7, 'PERMISSION_DENIED: nope'), context), { code: 'temporal_auth_failed' });
  t.like(describeCliError(serviceError(3, 'INVALID_ARGUMENT: odd'), context), { code: 'temporal_error', exitCode: 2 });
  t.like(describeCliError(new NamespaceNotFoundError('agents'), context), { code: 'namespace_not_found' });
});

test('an error Orchard does not know is internal, exit 1, one line', (t) => {
  const failure = describeCliError(new Error('something odd\n    at somewhere'), context);
  t.deepEqual(failure, { code: 'internal', message: 'something odd (ORCHARD_DEBUG=1 prints the stack)', exitCode: 1 });
});
