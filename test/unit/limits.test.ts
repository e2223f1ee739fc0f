import test from 'ava';
import { limitsFromEnv } from '../../activities/limits';
import { createSessionProblem, resolveLimits } from '../../contract/messages';

const create = { sessionId: 's1', title: 't', repo: '/srv/repo', host: 'h1' };

test('a session limit below its minimum is refused by create and by the worker environment alike', (t) => {
  t.regex(createSessionProblem({ ...create, limits: { historyBudgetBytes: 1000 } })?.message ?? '', /historyBudgetBytes must be at least/);
  t.regex(createSessionProblem({ ...create, limits: { maxQueuedTasks: 0 } })?.message ?? '', /positive integer/);
  t.is(createSessionProblem({ ...create, limits: { historyBudgetBytes: 2 * 1024 * 1024 } }), undefined);
  t.throws(() => limitsFromEnv({ ORCHARD_HISTORY_BUDGET_BYTES: '1000' }), { message: /ORCHARD_HISTORY_BUDGET_BYTES=1000: .*at least/ });
  t.throws(() => limitsFromEnv({ ORCHARD_MAX_QUEUED_TASKS: 'many' }), { message: /positive integer/ });
});

test('limits resolve as the creator asked, else the worker environment, else the code', (t) => {
  const env = limitsFromEnv({ ORCHARD_MAX_STEPS_PER_TURN: '7', ORCHARD_TURNS_PER_RUN: '9' });
  const limits = resolveLimits({ turnsPerRun: 3 }, env);
  t.is(limits.turnsPerRun, 3);
  t.is(limits.maxStepsPerTurn, 7);
  t.is(limits.bashTimeoutSeconds, resolveLimits(undefined).bashTimeoutSeconds);
});
