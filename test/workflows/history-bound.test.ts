import test from 'ava';
import { OrchardError } from '../../client/client';
import { sessionWorkflowId } from '../../contract/messages';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';

const shared = sharedOrchard(test);

/**
 * How many 100 KB tasks are sent (ORCHARD_TEST_HISTORY_SENDS): 200 by default, about twenty runs of the session
 * (each continues-as-new at the 2 MiB budget) in a minute or two; 1000 took six minutes on a loaded 2-core machine.
 */
const SENDS = Number(process.env.ORCHARD_TEST_HISTORY_SENDS ?? 200);
const TASK_BYTES = 100 * 1024;
// Below the server's own continue-as-new suggestion (4 MiB on the dev server), so only the session's budget can hold it.
const BUDGET = 2 * 1024 * 1024;
/**
 * The stated bound of one run's history: the budget, plus what one workflow task can accept past it (the
 * validators of the at most 10 updates in flight see the same history size; each task's text is in history twice,
 * in its update and in its store activity's input), plus one turn's events.
 */
const BOUND = BUDGET + 2 * 10 * TASK_BYTES + 512 * 1024;

test(`${SENDS} sends of 100 KB all run, across continue-as-new, and no run of the session passes its history bound`, async (t) => {
  t.timeout(900_000);
  const orchard = shared();
  const sessionId = uniqueId('flood');
  const scenario = writeScenario({ name: 'flood', turns: [{ repeat: true, steps: [{ content: 'ok' }] }] });
  await orchard.client.createSession({
    sessionId,
    title: 'flood',
    repo: makeRepo(),
    model: { provider: 'scripted', scenario },
    // No turn bound: only the history budget may make this session continue-as-new.
    limits: { historyBudgetBytes: BUDGET, maxQueuedTasks: SENDS, contextChars: 3 * TASK_BYTES, turnsPerRun: 100_000 },
  });

  // Eight senders at once; a `queue_full` refusal (the run is at its budget until it continues-as-new) is retried.
  let next = 0;
  let refusals = 0;
  const accepted: string[] = [];
  const sender = async () => {
    for (let i = next++; i < SENDS; i = next++) {
      const task = `task ${i}: ${'x'.repeat(TASK_BYTES - 16)}`;
      for (;;) {
        try {
          const ack = await orchard.client.send(sessionId, { task, requestId: `flood-${i}` });
          accepted.push(ack.taskId);
          break;
        } catch (err) {
          if (!(err instanceof OrchardError) || err.code !== 'queue_full') throw err;
          refusals += 1;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
  };
  await Promise.all(Array.from({ length: 8 }, sender));
  t.is(new Set(accepted).size, SENDS);

  const deadline = Date.now() + 800_000;
  let view = await orchard.client.status(sessionId);
  while (view.tasks!.done < SENDS) {
    if (Date.now() > deadline) throw new Error(`only ${view.tasks!.done} of ${SENDS} tasks done`);
    await new Promise((r) => setTimeout(r, 500));
    view = await orchard.client.status(sessionId);
  }
  t.deepEqual(view.tasks, { queued: 0, running: 0, done: SENDS, failed: 0, cancelled: 0 });

  // Walk the chain of runs back from the current one: every run's history stays under the bound.
  const sizes: number[] = [];
  const workflowId = sessionWorkflowId(sessionId);
  const { namespace } = orchard.temporal.options;
  let runId: string | undefined = (await orchard.temporal.workflow.getHandle(workflowId).describe()).runId;
  while (runId) {
    const described = await orchard.temporal.workflow.getHandle(workflowId, runId).describe();
    sizes.push(Number(described.raw.workflowExecutionInfo?.historySizeBytes ?? 0));
    runId = await previousRun(orchard.temporal, namespace, workflowId, runId);
  }
  const largest = Math.max(...sizes);
  t.log(
    `${SENDS} sends of ${TASK_BYTES / 1024} KiB (${refusals} queue_full refusals retried) ran in ${sizes.length} runs; ` +
      `largest run history ${(largest / 1024 / 1024).toFixed(2)} MiB, bound ${(BOUND / 1024 / 1024).toFixed(2)} MiB`,
  );
  t.true(sizes.length > 1, 'the session continued-as-new');
  t.true(largest <= BOUND, `a run's history reached ${largest} bytes`);

  // Nothing was lost across continue-as-new: every task is stored once, done, and opened exactly one turn.
  const tasks = await orchard.pool.query(`SELECT state, count(*)::int AS n FROM session_tasks WHERE execution_id = $1 GROUP BY state`, [view.executionId]);
  t.deepEqual(tasks.rows, [{ state: 'done', n: SENDS }]);
  const opened = await orchard.pool.query(
    `SELECT count(DISTINCT task_id)::int AS n, count(*)::int AS rows FROM transcript_entries WHERE execution_id = $1 AND role = 'user'`,
    [view.executionId],
  );
  t.deepEqual(opened.rows[0], { n: SENDS, rows: SENDS });
});

/** The run that continued-as-new into `runId`, read from its first history event. */
async function previousRun(temporal: import('@temporalio/client').Client, namespace: string, workflowId: string, runId: string) {
  const first = await temporal.workflowService.getWorkflowExecutionHistory({ namespace, execution: { workflowId, runId }, maximumPageSize: 1 });
  return first.history?.events?.[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
}
