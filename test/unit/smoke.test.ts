import test from 'ava';
import { isErrorCode } from '../../contract/errors';

test('typed error codes are recognised', (t) => {
  t.true(isErrorCode('session_closed'));
  t.false(isErrorCode('no_such_code'));
});
