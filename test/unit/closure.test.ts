import { isDeepStrictEqual } from 'node:util';
import test from 'ava';
import fc from 'fast-check';
import {
  validateClosure,
  HANDOFF_RESOLUTIONS,
  type BoardHandoff,
  type BoardOutput,
  type BoardSnapshot,
  type BoardTask,
  type BoardUserEvent,
  type ClosureResult,
  type HandoffState,
  type TaskStatus,
} from '../../workflows/team/closure';

const TEAM = 'team-a';
const GEN = 3;

/** A board at generation 3, assessed at its current revision, with no blocker; `over` replaces any part. */
function board(over: Partial<BoardSnapshot> = {}): BoardSnapshot {
  return {
    teamId: TEAM,
    generation: GEN,
    workRevision: 10,
    assessedRevision: 10,
    tasks: [],
    outputs: [],
    handoffs: [],
    userEvents: [],
    blockers: { inboxUnread: 0, turnsRunning: 0 },
    ...over,
  };
}

/** A completed task with its own output row of the current generation. */
function done(id: string): { task: BoardTask; output: BoardOutput } {
  return { task: { id, status: 'completed', outputId: `out-${id}` }, output: { id: `out-${id}`, taskId: id, generation: GEN } };
}

const codes = (r: ClosureResult) => r.reasons.map((x) => x.code);
const codesOf = (r: ClosureResult, taskId: string) => r.reasons.filter((x) => x.taskId === taskId).map((x) => x.code);

/** Three completed tasks, each with its output: the baseline every matrix row breaks one way. */
function allValid(): BoardSnapshot {
  const ds = ['plan', 'impl', 'test'].map(done);
  return board({ tasks: ds.map((d) => d.task), outputs: ds.map((d) => d.output) });
}

test('all valid: every task completed with an output of this generation is delivered, with the evidence', (t) => {
  const r = validateClosure(allValid());
  t.is(r.outcome, 'delivered');
  t.is(r.candidate, 'ready');
  t.deepEqual(r.reasons, []);
  t.deepEqual(r.evidence.taskIds, ['impl', 'plan', 'test']);
  t.deepEqual(r.evidence.outputIds, ['out-impl', 'out-plan', 'out-test']);
  t.deepEqual(
    r.evidence.resolutions.map((x) => [x.taskId, x.kind]),
    [
      ['impl', 'completed'],
      ['plan', 'completed'],
      ['test', 'completed'],
    ],
  );
  t.is(typeof r.validatorVersion, 'string');
});

test('an empty board is not applicable, never delivered', (t) => {
  const r = validateClosure(board());
  t.is(r.outcome, 'not_applicable');
  t.is(r.candidate, 'not_applicable');
  t.deepEqual(codes(r), ['board_empty']);
});

test('all cancelled ends cancelled, never delivered, even when every cancel cites a real user event', (t) => {
  const tasks: BoardTask[] = ['a', 'b'].map((id) => ({ id, status: 'cancelled', cancel: { by: 'user', userEventId: `ev-${id}` } }));
  const userEvents = ['a', 'b'].map((id) => ({ id: `ev-${id}`, teamId: TEAM, kind: 'cancel_task', taskId: id }));
  const r = validateClosure(board({ tasks, userEvents }));
  t.is(r.outcome, 'cancelled');
  t.is(r.candidate, 'blocked');
  t.true(codes(r).includes('all_cancelled'));
});

test("a board whose tasks the Coordinator cancelled is not a user's abandonment: not cancelled, not delivered", (t) => {
  const byCoordinator = validateClosure(board({ tasks: [{ id: 'a', status: 'cancelled', cancel: { by: 'coordinator' } }] }));
  t.is(byCoordinator.outcome, 'not_delivered');
  t.deepEqual(codes(byCoordinator), ['all_cancelled', 'cancelled_by_coordinator']);
  // One task the user removed and one the Coordinator cancelled: still not the user's word.
  const mixed = validateClosure(
    board({
      tasks: [
        { id: 'a', status: 'cancelled', cancel: { by: 'user', userEventId: 'ev-a' } },
        { id: 'b', status: 'cancelled', cancel: { by: 'coordinator' } },
      ],
      userEvents: [{ id: 'ev-a', teamId: TEAM, kind: 'cancel_task', taskId: 'a' }],
    }),
  );
  t.is(mixed.outcome, 'not_delivered');
  // A cancel with no user event is not the user's either.
  t.is(validateClosure(board({ tasks: [{ id: 'a', status: 'cancelled', cancel: { by: 'user' } }] })).outcome, 'not_delivered');
});

test('all failed is not delivered, and says which tasks failed', (t) => {
  const r = validateClosure(
    board({
      tasks: [
        { id: 'a', status: 'failed' },
        { id: 'b', status: 'failed' },
      ],
    }),
  );
  t.is(r.outcome, 'not_delivered');
  t.is(r.candidate, 'blocked');
  t.deepEqual(codes(r), ['all_failed', 'task_failed', 'task_failed']);
  t.deepEqual(r.evidence.taskIds, []);
});

test('missing output: no output id, an output id with no row, or the row of another task', (t) => {
  const valid = allValid();
  const noRef = validateClosure({ ...valid, tasks: valid.tasks.map((x) => (x.id === 'impl' ? { id: 'impl', status: 'completed' } : x)) });
  t.is(noRef.outcome, 'not_delivered');
  t.deepEqual(codes(noRef), ['missing_output']);
  t.is(noRef.reasons[0].taskId, 'impl');
  t.false(noRef.evidence.taskIds.includes('impl'));

  const noRow = validateClosure({ ...valid, outputs: valid.outputs.filter((o) => o.taskId !== 'impl') });
  t.is(noRow.outcome, 'not_delivered');
  t.deepEqual(codesOf(noRow, 'impl'), ['missing_output']);

  const foreign = validateClosure({ ...valid, outputs: valid.outputs.map((o) => (o.id === 'out-impl' ? { ...o, taskId: 'test' } : o)) });
  t.is(foreign.outcome, 'not_delivered');
  t.deepEqual(codesOf(foreign, 'impl'), ['output_task_mismatch']);
});

test('stale evidence: an output of another generation, or an assessment at another revision, is not delivered', (t) => {
  const valid = allValid();
  for (const generation of [GEN - 1, GEN + 1]) {
    const r = validateClosure({ ...valid, outputs: valid.outputs.map((o) => (o.taskId === 'test' ? { ...o, generation } : o)) });
    t.is(r.outcome, 'not_delivered', `output of generation ${generation}`);
    t.deepEqual(codes(r), ['stale_evidence']);
    t.is(r.reasons[0].taskId, 'test');
  }
  const staleRevision = validateClosure({ ...valid, assessedRevision: 9 });
  t.is(staleRevision.outcome, 'not_delivered');
  t.deepEqual(codes(staleRevision), ['stale_revision']);
});

test('replacement chain: a cancelled or failed task counts when its replacement chain ends in a completed task', (t) => {
  const end = done('v3');
  const chain = board({
    tasks: [
      { id: 'v1', status: 'cancelled', cancel: { by: 'coordinator', kind: 'reassign' } },
      { id: 'v2', status: 'failed', replacesTaskId: 'v1' },
      { ...end.task, replacesTaskId: 'v2' },
    ],
    outputs: [end.output],
    handoffs: [{ oldTaskId: 'v1', newTaskId: 'v2', state: 'released' }],
  });
  const r = validateClosure(chain);
  t.is(r.outcome, 'delivered');
  t.deepEqual(r.evidence.resolutions, [
    { taskId: 'v1', kind: 'replaced_by', by: 'v2' },
    { taskId: 'v2', kind: 'replaced_by', by: 'v3' },
    { taskId: 'v3', kind: 'completed' },
  ]);
  t.deepEqual(r.evidence.outputIds, ['out-v3']);

  // The end of the chain fails: no link counts, and each says why.
  const broken = validateClosure({ ...chain, tasks: chain.tasks.map((x) => (x.id === 'v3' ? { id: 'v3', status: 'failed', replacesTaskId: 'v2' } : x)) });
  t.is(broken.outcome, 'not_delivered');
  t.deepEqual(codesOf(broken, 'v1'), ['cancelled_by_coordinator', 'replacement_chain_broken']);
  t.deepEqual(codesOf(broken, 'v2'), ['task_failed', 'replacement_chain_broken']);
  t.deepEqual(codesOf(broken, 'v3'), ['task_failed']);

  // A coordinator cancel with no replacement never counts.
  const extra = allValid();
  const dropped = validateClosure({
    ...extra,
    tasks: [...extra.tasks, { id: 'docs', status: 'cancelled', cancel: { by: 'coordinator', reason: 'not needed' } }],
  });
  t.is(dropped.outcome, 'not_delivered');
  t.deepEqual(codes(dropped), ['cancelled_by_coordinator']);

  // A replacement of a task that is not on the board is a hole in the ledger view.
  const orphan = validateClosure({ ...extra, tasks: extra.tasks.map((x) => (x.id === 'test' ? { ...x, replacesTaskId: 'ghost' } : x)) });
  t.is(orphan.outcome, 'not_delivered');
  t.deepEqual(codes(orphan), ['replacement_target_unknown']);
});

test('an open task is not closed by a completed replacement: it may still write', (t) => {
  const end = done('new');
  const r = validateClosure(
    board({
      tasks: [
        { id: 'old', status: 'in_progress' },
        { ...end.task, replacesTaskId: 'old' },
      ],
      outputs: [end.output],
    }),
  );
  t.is(r.outcome, 'not_delivered');
  t.deepEqual(codes(r), ['task_open']);
  t.deepEqual(r.evidence.taskIds, ['new']);
});

test('user scope removal counts only with a real user event of this team about this task', (t) => {
  const valid = allValid();
  const withCancel = (cancel: BoardTask['cancel'], userEvents: BoardUserEvent[]) =>
    validateClosure({ ...valid, tasks: [...valid.tasks, { id: 'docs', status: 'cancelled', cancel }], userEvents });
  const real: BoardUserEvent = { id: 'ev-1', teamId: TEAM, kind: 'cancel_task', taskId: 'docs' };

  const removed = withCancel({ by: 'user', userEventId: 'ev-1', reason: 'out of scope' }, [real]);
  t.is(removed.outcome, 'delivered');
  t.deepEqual(
    removed.evidence.resolutions.find((x) => x.taskId === 'docs'),
    { taskId: 'docs', kind: 'user_scope_removed', userEventId: 'ev-1' },
  );

  const otherTeam = withCancel({ by: 'user', userEventId: 'ev-1' }, [{ ...real, teamId: 'team-b' }]);
  t.is(otherTeam.outcome, 'not_delivered');
  t.deepEqual(codes(otherTeam), ['user_event_foreign']);

  const otherTask = withCancel({ by: 'user', userEventId: 'ev-1' }, [{ ...real, taskId: 'impl' }]);
  t.is(otherTask.outcome, 'not_delivered');
  t.deepEqual(codes(otherTask), ['user_event_foreign']);

  const missing = withCancel({ by: 'user', userEventId: 'ev-404' }, [real]);
  t.is(missing.outcome, 'not_delivered');
  t.deepEqual(codes(missing), ['user_event_missing']);

  const uncited = withCancel({ by: 'user' }, [real]);
  t.is(uncited.outcome, 'not_delivered');
  t.deepEqual(codes(uncited), ['cancelled_without_user_event']);

  const noRecord = withCancel(undefined, [real]);
  t.deepEqual(codes(noRecord), ['cancelled_without_user_event']);

  // The Coordinator cannot borrow a user's event to drop scope.
  const coordinator = withCancel({ by: 'coordinator', userEventId: 'ev-1' }, [real]);
  t.is(coordinator.outcome, 'not_delivered');
  t.deepEqual(codes(coordinator), ['cancelled_by_coordinator']);
});

test('a chain may end in a user scope removal, but delivery still needs one completed task with output', (t) => {
  const tasks: BoardTask[] = [
    { id: 'a', status: 'failed' },
    { id: 'b', status: 'cancelled', replacesTaskId: 'a', cancel: { by: 'user', userEventId: 'ev-b' } },
  ];
  const userEvents = [{ id: 'ev-b', teamId: TEAM, kind: 'resolve_handoff', taskId: 'b' }];
  const r = validateClosure(board({ tasks, userEvents }));
  t.is(r.outcome, 'not_delivered');
  t.deepEqual(codes(r), ['no_completed_output']);
  t.deepEqual(r.evidence.taskIds, ['a', 'b']);

  const withWork = done('c');
  const delivered = validateClosure(board({ tasks: [...tasks, withWork.task], outputs: [withWork.output], userEvents }));
  t.is(delivered.outcome, 'delivered');
  t.deepEqual(
    delivered.evidence.resolutions.find((x) => x.taskId === 'a'),
    { taskId: 'a', kind: 'replaced_by', by: 'b' },
  );
});

test('a handoff that is not released blocks delivery, whatever its other state', (t) => {
  const valid = allValid();
  const states: HandoffState[] = ['requested', 'yielding', 'timeout', 'unknown', 'failed'];
  for (const state of states) {
    const r = validateClosure({ ...valid, handoffs: [{ oldTaskId: 'x', newTaskId: 'impl', state }] });
    t.is(r.outcome, 'not_delivered', state);
    t.is(r.candidate, 'blocked');
    t.deepEqual(codes(r), ['handoff_pending']);
    t.is(r.reasons[0].taskId, 'impl');
  }
  t.is(validateClosure({ ...valid, handoffs: [{ oldTaskId: 'x', newTaskId: 'impl', state: 'released' }] }).outcome, 'delivered');
  // A user who resolved a timed-out handoff keep_stopped settled it: it no longer blocks (the replacement was
  // cancelled by that resolution, and must itself be closed). A `release` resolution without the state does not.
  for (const state of ['timeout', 'unknown', 'failed'] as const) {
    t.is(validateClosure({ ...valid, handoffs: [{ oldTaskId: 'x', newTaskId: 'impl', state, resolution: 'keep_stopped' }] }).outcome, 'delivered', state);
    const r = validateClosure({ ...valid, handoffs: [{ oldTaskId: 'x', newTaskId: 'impl', state, resolution: 'release' }] });
    t.deepEqual([r.outcome, codes(r)], ['not_delivered', ['handoff_pending']], state);
  }
});

test('a reassigned task counts through its replacement, not as a scope removal, though the user event is real', (t) => {
  const end = done('impl-r1');
  const reassign: BoardUserEvent = { id: 'ev-reassign', teamId: TEAM, kind: 'reassign', taskId: 'impl' };
  const reassigned = board({
    tasks: [
      { id: 'impl', status: 'cancelled', cancel: { by: 'user', kind: 'reassign', userEventId: 'ev-reassign' } },
      { ...end.task, replacesTaskId: 'impl' },
    ],
    outputs: [end.output],
    handoffs: [{ oldTaskId: 'impl', newTaskId: 'impl-r1', state: 'released' }],
    userEvents: [reassign],
  });
  const r = validateClosure(reassigned);
  t.is(r.outcome, 'delivered');
  t.deepEqual(r.evidence.resolutions, [
    { taskId: 'impl', kind: 'replaced_by', by: 'impl-r1' },
    { taskId: 'impl-r1', kind: 'completed' },
  ]);
  // Its replacement failed: the reassign's user event does not close the old task either.
  const failed = validateClosure({
    ...reassigned,
    tasks: reassigned.tasks.map((x) => (x.id === 'impl-r1' ? { id: 'impl-r1', status: 'failed', replacesTaskId: 'impl' } : x)),
  });
  t.is(failed.outcome, 'not_delivered');
  t.deepEqual(codesOf(failed, 'impl'), ['replacement_chain_broken']);
  t.deepEqual(codesOf(failed, 'impl-r1'), ['task_failed']);
  // The user kept it stopped: the replacement is removed from scope by that event, and the old task closes through it.
  const keep: BoardUserEvent = { id: 'ev-keep', teamId: TEAM, kind: 'keep_stopped', taskId: 'impl-r1' };
  const other = done('docs');
  const kept = validateClosure({
    ...reassigned,
    tasks: [
      reassigned.tasks[0],
      { id: 'impl-r1', status: 'cancelled', replacesTaskId: 'impl', cancel: { by: 'user', kind: 'keep_stopped', userEventId: 'ev-keep' } },
      other.task,
    ],
    outputs: [other.output],
    handoffs: [{ oldTaskId: 'impl', newTaskId: 'impl-r1', state: 'timeout', resolution: 'keep_stopped' }],
    userEvents: [reassign, keep],
  });
  t.is(kept.outcome, 'delivered');
  t.deepEqual(kept.evidence.resolutions, [
    { taskId: 'docs', kind: 'completed' },
    { taskId: 'impl', kind: 'replaced_by', by: 'impl-r1' },
    { taskId: 'impl-r1', kind: 'user_scope_removed', userEventId: 'ev-keep' },
  ]);
});

test('an open task, an unread inbox message or a running turn blocks delivery', (t) => {
  const valid = allValid();
  for (const status of ['pending', 'in_progress'] as const) {
    const r = validateClosure({ ...valid, tasks: [...valid.tasks, { id: 'more', status }] });
    t.is(r.outcome, 'not_delivered');
    t.is(r.candidate, 'blocked');
    t.deepEqual(codes(r), ['task_open']);
  }
  const inbox = validateClosure({ ...valid, blockers: { inboxUnread: 1, turnsRunning: 0 } });
  t.deepEqual([inbox.outcome, codes(inbox)], ['not_delivered', ['inbox_unread']]);
  const turn = validateClosure({ ...valid, blockers: { inboxUnread: 0, turnsRunning: 2 } });
  t.deepEqual([turn.outcome, codes(turn)], ['not_delivered', ['turn_running']]);
});

test('cycles of replacesTaskId are never delivered, even when a task on the cycle is completed', (t) => {
  const a = done('a');
  const cycle = validateClosure(
    board({
      tasks: [
        { ...a.task, replacesTaskId: 'b' },
        { id: 'b', status: 'cancelled', replacesTaskId: 'a', cancel: { by: 'coordinator' } },
      ],
      outputs: [a.output],
    }),
  );
  t.is(cycle.outcome, 'not_delivered');
  t.deepEqual(codes(cycle), ['replacement_cycle', 'replacement_cycle']);

  const self = validateClosure(board({ tasks: [{ ...a.task, replacesTaskId: 'a' }], outputs: [a.output] }));
  t.is(self.outcome, 'not_delivered');
  t.deepEqual(codes(self), ['replacement_cycle']);

  // A cycle with nothing counted on it closes nothing.
  const idle = validateClosure(
    board({
      tasks: [{ id: 'x', status: 'cancelled', replacesTaskId: 'y', cancel: { by: 'coordinator' } }, { id: 'y', status: 'failed', replacesTaskId: 'x' }, a.task],
      outputs: [a.output],
    }),
  );
  t.is(idle.outcome, 'not_delivered');
  t.deepEqual(idle.evidence.taskIds, ['a']);
});

test('duplicate ids make the board inconsistent: nothing is closed', (t) => {
  const valid = allValid();
  const twice = validateClosure({ ...valid, tasks: [...valid.tasks, { id: 'impl', status: 'failed' }] });
  t.is(twice.outcome, 'not_delivered');
  t.deepEqual(codes(twice), ['duplicate_task_id']);
  t.deepEqual(twice.evidence.taskIds, []);

  const outputTwice = validateClosure({ ...valid, outputs: [...valid.outputs, { id: 'out-impl', taskId: 'impl', generation: GEN - 1 }] });
  t.deepEqual(codes(outputTwice), ['duplicate_output_id']);
});

// ---- Properties over generated boards ----

const IDS = ['t0', 't1', 't2', 't3', 't4', 't5'];
const STATUSES: TaskStatus[] = ['pending', 'in_progress', 'completed', 'failed', 'cancelled'];
const HANDOFF_STATES: HandoffState[] = ['requested', 'yielding', 'released', 'timeout', 'unknown', 'failed'];

/** Rarely `undefined`: most rows are plain, a few carry the field that can break (or build) a closure. */
const sometimes = <T>(arb: fc.Arbitrary<T>, weight = 1) => fc.oneof({ arbitrary: fc.constant(undefined), weight: 8 }, { arbitrary: arb, weight });
const often = <T>(usual: T, other: fc.Arbitrary<T>) => fc.oneof({ arbitrary: fc.constant(usual), weight: 8 }, { arbitrary: other, weight: 1 });
const defined = <T extends object>(o: T) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

/**
 * Boards of up to six tasks, biased towards closure (completed tasks with their own current output, user cancels
 * citing their own event, released handoffs, no blockers), so that a good share is delivered and each way of
 * breaking a closure shows up alone.
 */
const boardArb: fc.Arbitrary<BoardSnapshot> = fc
  .uniqueArray(fc.constantFrom(...IDS), { maxLength: 6 })
  .chain((ids) =>
    fc.record({
      tasks: fc.tuple(
        ...ids.map((id) =>
          fc
            .record({
              status: fc.oneof({ arbitrary: fc.constant<TaskStatus>('completed'), weight: 6 }, { arbitrary: fc.constantFrom(...STATUSES), weight: 3 }),
              outputId: often(`out-${id}`, sometimes(fc.constantFrom(...IDS.map((i) => `out-${i}`)))),
              replacesTaskId: sometimes(fc.constantFrom(...IDS)),
              cancel: fc.record({
                by: fc.constantFrom('user' as const, 'coordinator' as const),
                userEventId: often(`ev-${id}`, sometimes(fc.constantFrom(...IDS.map((i) => `ev-${i}`), 'ev-x'))),
              }),
            })
            .map((x): BoardTask => defined({ id, ...x, cancel: x.status === 'cancelled' ? defined(x.cancel) : undefined })),
        ),
      ),
      // Every task's own output row, most of them current; a missing or foreign row now and then.
      outputs: fc.tuple(
        ...ids.map((id) =>
          sometimes(
            fc.record({ id: fc.constant(`out-${id}`), taskId: often(id, fc.constantFrom(...IDS)), generation: often(GEN, fc.constantFrom(GEN - 1, GEN + 1)) }),
            64,
          ),
        ),
      ),
      handoffs: fc.array(
        fc
          .record({
            oldTaskId: fc.constantFrom(...IDS),
            newTaskId: fc.constantFrom(...IDS),
            state: often<HandoffState>('released', fc.constantFrom(...HANDOFF_STATES)),
            resolution: sometimes(fc.constantFrom(...HANDOFF_RESOLUTIONS)),
          })
          .map((h) => defined(h)),
        { maxLength: 2 },
      ),
      userEvents: fc.tuple(
        ...ids.map((id) =>
          sometimes(
            fc.record({
              id: fc.constant(`ev-${id}`),
              teamId: often(TEAM, fc.constant('team-b')),
              kind: fc.constant('cancel_task'),
              taskId: often(id, fc.constantFrom(...IDS)),
            }),
            32,
          ),
        ),
      ),
      stale: fc.nat(15),
      inboxUnread: often(0, fc.nat(3)),
      turnsRunning: often(0, fc.nat(3)),
    }),
  )
  .map((g) => ({
    teamId: TEAM,
    generation: GEN,
    workRevision: 10,
    assessedRevision: g.stale === 0 ? 9 : 10,
    tasks: g.tasks,
    outputs: g.outputs.filter((o) => o !== undefined),
    handoffs: g.handoffs,
    userEvents: g.userEvents.filter((e) => e !== undefined),
    blockers: { inboxUnread: g.inboxUnread, turnsRunning: g.turnsRunning },
  }));

/**
 * An independent check of a delivered result against the board: every task has a resolution that the board's own
 * rows justify, `replaced_by` links end in a counted task, and nothing blocks. Returns what is wrong, if anything.
 */
function certificateProblems(b: BoardSnapshot, r: ClosureResult): string[] {
  const problems: string[] = [];
  const resolution = (id: string) => r.evidence.resolutions.filter((x) => x.taskId === id);
  for (const task of b.tasks) {
    const rs = resolution(task.id);
    if (rs.length !== 1) {
      problems.push(`${task.id}: ${rs.length} resolutions`);
      continue;
    }
    if (task.status === 'pending' || task.status === 'in_progress') problems.push(`${task.id} is open`);
    // Follow the chain; it must end in a completed task or a user removal within as many steps as there are tasks.
    let at = rs[0];
    let atTask = task;
    for (let step = 0; at.kind === 'replaced_by'; step++) {
      const next = b.tasks.filter((x) => x.id === at.by);
      if (step > b.tasks.length || next.length !== 1 || next[0].replacesTaskId !== atTask.id) {
        problems.push(`${task.id}: broken replaced_by link at ${atTask.id}`);
        break;
      }
      atTask = next[0];
      [at] = resolution(atTask.id);
      if (!at) {
        problems.push(`${task.id}: chain reaches unresolved ${atTask.id}`);
        break;
      }
    }
    if (at?.kind === 'completed') {
      const rows = b.outputs.filter((o) => o.id === atTask.outputId);
      const ok = atTask.status === 'completed' && rows.length === 1 && rows[0].taskId === atTask.id && rows[0].generation === b.generation;
      if (!ok || !r.evidence.outputIds.includes(rows[0].id)) problems.push(`${atTask.id}: completed without a current output of its own`);
    }
    if (rs[0].kind === 'user_scope_removed' && b.tasks.some((x) => x.replacesTaskId === task.id))
      problems.push(`${task.id}: removed from scope, but a replacement carries it`);
    if (at?.kind === 'user_scope_removed') {
      const events = b.userEvents.filter((e) => e.id === at.userEventId);
      const ok = atTask.status === 'cancelled' && atTask.cancel?.by === 'user' && atTask.cancel.userEventId === at.userEventId;
      if (!ok || events.length !== 1 || events[0].teamId !== b.teamId || events[0].taskId !== atTask.id)
        problems.push(`${atTask.id}: removal without a real user event`);
    }
  }
  if (!r.evidence.resolutions.some((x) => x.kind === 'completed')) problems.push('no completed task');
  if (b.handoffs.some((h) => h.state !== 'released' && h.resolution !== 'keep_stopped')) problems.push('pending handoff');
  if (b.blockers.inboxUnread > 0 || b.blockers.turnsRunning > 0) problems.push('blocker');
  if (b.assessedRevision !== b.workRevision) problems.push('stale revision');
  return problems;
}

/** A board built to be delivered: chains of replacements, each ending in a completed task or a user removal. */
const deliveredArb: fc.Arbitrary<BoardSnapshot> = fc
  .array(
    fc.record({
      end: fc.constantFrom('completed', 'removed'),
      before: fc.array(fc.constantFrom<'failed' | 'coordinator' | 'user' | 'completed'>('failed', 'coordinator', 'user', 'completed'), { maxLength: 3 }),
    }),
    { minLength: 1, maxLength: 4 },
  )
  .filter((chains) => chains.some((c) => c.end === 'completed'))
  .map((chains) => {
    const tasks: BoardTask[] = [];
    const outputs: BoardOutput[] = [];
    const userEvents: BoardUserEvent[] = [];
    const handoffs: BoardHandoff[] = [];
    chains.forEach((c, i) => {
      const ids = [...c.before.map((_, j) => `c${i}-${j}`), `c${i}-end`];
      c.before.forEach((kind, j) => {
        const id = ids[j];
        const replacesTaskId = j > 0 ? ids[j - 1] : undefined;
        const base = replacesTaskId ? { id, replacesTaskId } : { id };
        // Links before the end do not count by themselves: a user cancel here cites no event, a completion has no output.
        if (kind === 'failed') tasks.push({ ...base, status: 'failed' });
        else if (kind === 'completed') tasks.push({ ...base, status: 'completed' });
        else tasks.push({ ...base, status: 'cancelled', cancel: { by: kind } });
        handoffs.push({ oldTaskId: id, newTaskId: ids[j + 1], state: 'released' });
      });
      const id = ids[ids.length - 1];
      const replaces = c.before.length > 0 ? { replacesTaskId: ids[ids.length - 2] } : {};
      if (c.end === 'completed') {
        tasks.push({ id, status: 'completed', outputId: `out-${id}`, ...replaces });
        outputs.push({ id: `out-${id}`, taskId: id, generation: GEN });
      } else {
        tasks.push({ id, status: 'cancelled', cancel: { by: 'user', userEventId: `ev-${id}` }, ...replaces });
        userEvents.push({ id: `ev-${id}`, teamId: TEAM, kind: 'cancel_task', taskId: id });
      }
    });
    return board({ tasks, outputs, userEvents, handoffs });
  });

test('the board generator reaches every outcome, so the properties below are not vacuous', (t) => {
  const outcomes = new Set(fc.sample(boardArb, { numRuns: 2000, seed: 7 }).map((b) => validateClosure(b).outcome));
  t.deepEqual([...outcomes].sort(), ['cancelled', 'delivered', 'not_applicable', 'not_delivered']);
});

test('property: never delivered unless every task is closed by one of the three rules and nothing blocks', (t) => {
  fc.assert(
    fc.property(boardArb, (b) => {
      const r = validateClosure(b);
      if (r.outcome !== 'delivered') return r.candidate !== 'ready';
      return r.candidate === 'ready' && r.reasons.length === 0 && certificateProblems(b, r).length === 0;
    }),
    { numRuns: 3000 },
  );
  t.pass();
});

test('property: a board built with a full closure and no blocker is delivered, and its certificate checks out', (t) => {
  fc.assert(
    fc.property(deliveredArb, (b) => {
      const r = validateClosure(b);
      return r.outcome === 'delivered' && r.evidence.taskIds.length === b.tasks.length && certificateProblems(b, r).length === 0;
    }),
  );
  t.pass();
});

test('property: removing the output row of any completed task of a delivered board makes it not delivered', (t) => {
  fc.assert(
    fc.property(
      deliveredArb.chain((b) => fc.tuple(fc.constant(b), fc.constantFrom(...b.outputs))),
      ([b, removed]) => {
        const r = validateClosure({ ...b, outputs: b.outputs.filter((o) => o !== removed) });
        return r.outcome === 'not_delivered' && r.reasons.some((x) => x.code === 'missing_output' && x.taskId === removed.taskId);
      },
    ),
  );
  t.pass();
});

test('property: the result is deterministic and does not depend on the order of any rows', (t) => {
  const shuffled = <T>(xs: readonly T[]) => fc.shuffledSubarray([...xs], { minLength: xs.length, maxLength: xs.length });
  fc.assert(
    fc.property(
      fc
        .oneof(boardArb, deliveredArb)
        .chain((b) => fc.tuple(fc.constant(b), shuffled(b.tasks), shuffled(b.outputs), shuffled(b.handoffs), shuffled(b.userEvents))),
      ([b, tasks, outputs, handoffs, userEvents]) => {
        const first = validateClosure(b);
        return (
          isDeepStrictEqual(validateClosure(structuredClone(b)), first) &&
          isDeepStrictEqual(validateClosure({ ...b, tasks, outputs, handoffs, userEvents }), first)
        );
      },
    ),
    { numRuns: 1000 },
  );
  t.pass();
});
