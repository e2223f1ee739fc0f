import test from 'ava';
import type { BoardSnapshot, BoardTask } from '../../workflows/team/closure';
import { boardOutcomeFacts, teamOutcome, type OutcomeFacts } from '../../workflows/team/outcome';

const TEAM = 'tm';

function board(tasks: BoardTask[], userEvents: BoardSnapshot['userEvents'] = []): BoardSnapshot {
  return {
    teamId: TEAM,
    generation: 1,
    workRevision: 5,
    assessedRevision: 5,
    tasks,
    outputs: [],
    handoffs: [],
    userEvents,
    blockers: { inboxUnread: 0, turnsRunning: 0 },
  };
}

const quiet: OutcomeFacts = { certified: false, archived: false, handoffs: [], quiet: true, completionRefused: false };

test('board facts: failed tasks nothing replaces, and whether users removed every task', (t) => {
  const facts = boardOutcomeFacts(
    board([
      { id: 'b', status: 'failed' },
      { id: 'a', status: 'failed' },
      { id: 'c', status: 'failed' },
      { id: 'c2', status: 'pending', replacesTaskId: 'c' },
    ]),
  );
  t.deepEqual(facts, { failedUnreplaced: ['a', 'b'], userRemovedAll: false });
  const removed = board(
    [{ id: 'a', status: 'cancelled', cancel: { by: 'user', userEventId: 'ev-a' } }],
    [{ id: 'ev-a', teamId: TEAM, kind: 'cancel_task', taskId: 'a' }],
  );
  t.true(boardOutcomeFacts(removed).userRemovedAll);
  t.false(boardOutcomeFacts(board([{ id: 'a', status: 'cancelled', cancel: { by: 'coordinator' } }])).userRemovedAll);
});

test('a failed task nobody replaced needs a person once the run is quiet; while the Coordinator works it is running', (t) => {
  const facts = boardOutcomeFacts(board([{ id: 'a', status: 'failed' }]));
  t.deepEqual(teamOutcome({ ...quiet, board: facts }), { outcome: 'needs_attention', because: ['task a failed and nothing replaces it'] });
  t.is(teamOutcome({ ...quiet, quiet: false, board: facts }).outcome, 'running');
});

test('a handoff at timeout or unknown needs a person at once; resolved, it does not', (t) => {
  for (const state of ['timeout', 'unknown', 'failed'] as const) {
    t.is(teamOutcome({ ...quiet, quiet: false, handoffs: [{ receiptId: 'h1', state }] }).outcome, 'needs_attention', state);
    t.is(teamOutcome({ ...quiet, handoffs: [{ receiptId: 'h1', state, resolution: 'keep_stopped' }] }).outcome, 'running', state);
  }
  t.is(teamOutcome({ ...quiet, handoffs: [{ receiptId: 'h1', state: 'yielding' }] }).outcome, 'running');
});

test('a refused completion on a quiet run needs a person', (t) => {
  t.is(teamOutcome({ ...quiet, completionRefused: true }).outcome, 'needs_attention');
  t.is(teamOutcome({ ...quiet, quiet: false, completionRefused: true }).outcome, 'running');
});

test('cancelled is the user word only: users removed every task, or an archive with nothing unresolved', (t) => {
  const userRemoved = { failedUnreplaced: [], userRemovedAll: true };
  t.is(teamOutcome({ ...quiet, board: userRemoved }).outcome, 'cancelled');
  // A board the Coordinator cancelled is not abandonment.
  const coordinatorCancelled = boardOutcomeFacts(board([{ id: 'a', status: 'cancelled', cancel: { by: 'coordinator' } }]));
  t.is(teamOutcome({ ...quiet, board: coordinatorCancelled }).outcome, 'running');
  t.is(teamOutcome({ ...quiet, archived: true }).outcome, 'cancelled');
});

test('an archive with unresolved failed or unknown work is failed, naming it', (t) => {
  const failed = teamOutcome({ ...quiet, archived: true, board: { failedUnreplaced: ['a'], userRemovedAll: false } });
  t.deepEqual(failed, { outcome: 'failed', because: ['task a failed and nothing replaces it'] });
  t.is(teamOutcome({ ...quiet, archived: true, handoffs: [{ receiptId: 'h1', state: 'unknown' }] }).outcome, 'failed');
});

test('a certificate is delivered, whatever else', (t) => {
  t.is(teamOutcome({ ...quiet, certified: true, completionRefused: true, handoffs: [{ receiptId: 'h1', state: 'timeout' }] }).outcome, 'delivered');
});
