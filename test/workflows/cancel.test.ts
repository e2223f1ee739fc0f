import test from 'ava';
import { cancelUpdate, sessionWorkflowId } from '../../contract/messages';
import { pidsWithCommandLine as liveProcesses } from '../helpers/processes';
import { waitFor as until } from '../helpers/wait';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

function spawningScenario(seconds: number) {
  // Grandchildren: two background sleeps and a nested subshell's sleep, all under the tool's bash.
  const command = `sleep ${seconds} & sleep ${seconds + 1} & (sleep ${seconds + 2} & wait) & wait`;
  return writeScenario({ name: 'spawner', turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command } }] }, { content: 'never' }] }] });
}

for (const how of ['cancel update', 'Temporal cancellation'] as const) {
  test(`${how} stops a running command and leaves none of its grandchildren alive`, async (t) => {
    const orchard = shared();
    const seconds = 4000 + Math.floor(Math.random() * 900);
    const needle = `sleep ${seconds}`;
    const sessionId = uniqueId('cancel');
    await orchard.client.createSession({
      sessionId,
      title: 'spawner',
      repo: makeRepo(),
      model: { provider: 'scripted', scenario: spawningScenario(seconds) },
      task: 'spawn',
    });
    await until(() => liveProcesses(`sleep ${seconds + 2}`).length > 0);
    t.true(liveProcesses(needle).length >= 1);

    const handle = orchard.temporal.workflow.getHandle(sessionWorkflowId(sessionId));
    if (how === 'cancel update') {
      const view = await orchard.client.cancel(sessionId, 'test');
      t.is(view.status, 'closed');
      t.is(view.lastTurn?.outcome, 'cancelled');
      t.is((await handle.describe()).status.name, 'COMPLETED');
      // The cancelled turn's end and the lease's release went out together: one workflow task scheduled both.
      const { events } = await handle.fetchHistory();
      const scheduledBy = (activity: string) =>
        (events ?? [])
          .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity)
          .map((e) => String(e.activityTaskScheduledEventAttributes!.workflowTaskCompletedEventId));
      t.is(scheduledBy('endTasks').length, 1);
      t.deepEqual(scheduledBy('releaseSessionWorktree'), scheduledBy('endTasks'));
    } else {
      await handle.cancel();
      await t.throwsAsync(handle.result());
      t.is((await handle.describe()).status.name, 'CANCELLED');
      t.is((await orchard.client.status(sessionId)).status, 'closed');
    }
    // Either way the running command was stopped on its host directly, not left to its next heartbeat (a quiet
    // command beats only every few seconds): one stopCommands, scheduled as the cancel was taken, and completed.
    const { events } = await handle.fetchHistory();
    const taken = (events ?? []).find((e) =>
      how === 'cancel update'
        ? e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === cancelUpdate.name
        : e.workflowExecutionCancelRequestedEventAttributes,
    );
    const stops = (events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'stopCommands');
    t.is(stops.length, 1);
    // An update is recorded accepted after the workflow task that took it; a cancel request before the one that takes it.
    const tasks = (events ?? []).filter((e) => e.workflowTaskCompletedEventAttributes);
    const takenBy =
      how === 'cancel update'
        ? tasks.filter((e) => Number(e.eventId) < Number(taken!.eventId)).at(-1)
        : tasks.find((e) => Number(e.eventId) > Number(taken!.eventId));
    t.is(String(stops[0].activityTaskScheduledEventAttributes!.workflowTaskCompletedEventId), String(takenBy!.eventId));
    t.truthy((events ?? []).find((e) => String(e.activityTaskCompletedEventAttributes?.scheduledEventId) === String(stops[0].eventId)));
    // Its run crossed every patch of its path (its start, the cancel, the close): one patch marker and one upsert of
    // TemporalChangeVersion for all of them (workflows/patch-epoch.ts), where it was one of each per patch.
    t.is((events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch').length, 1);
    const versionUpserts = (events ?? []).filter((e) =>
      Object.keys(e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields ?? {}).includes('TemporalChangeVersion'),
    );
    t.is(versionUpserts.length, 1);
    // WAIT_CANCELLATION_COMPLETED: the workflow ended only after the activity verified the group was gone.
    for (const s of [seconds, seconds + 1, seconds + 2]) t.deepEqual(liveProcesses(`sleep ${s}`), []);
    const { rows } = await orchard.pool.query(`SELECT state FROM tool_dispatches WHERE session_id = $1`, [sessionId]);
    t.deepEqual(rows, [{ state: 'settled' }]);
  });
}
