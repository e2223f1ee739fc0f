import type { Pool } from 'pg';
import type { StoredTask, TaskEnd } from '../../contract/activities';

/**
 * Every task a session accepted, with its text (issue 7, items 3 and 8): workflow history and continue-as-new
 * carry the task id, this table carries the words. States: queued → running → done | failed | cancelled.
 */

/** Idempotent: a retried store keeps the first text (a task id is never reused within a chain). */
/** Stores tasks (idempotent); answers the ids of those this call inserted (a retry's repeats are not among them). */
export async function storeTasks(pool: Pool, tasks: readonly StoredTask[]): Promise<Set<string>> {
  if (tasks.length === 0) return new Set();
  const { rows } = await pool.query<{ execution_id: string; task_id: string }>(
    `INSERT INTO session_tasks (execution_id, task_id, session_id, request_id, sender, task, state)
     SELECT * , 'queued' FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
     ON CONFLICT (execution_id, task_id) DO NOTHING
     RETURNING execution_id, task_id`,
    [
      tasks.map((t) => t.executionId),
      tasks.map((t) => t.taskId),
      tasks.map((t) => t.sessionId),
      tasks.map((t) => t.requestId ?? null),
      tasks.map((t) => t.from ?? null),
      tasks.map((t) => t.task),
    ],
  );
  return new Set(rows.map((r) => `${r.execution_id}/${r.task_id}`));
}

export async function taskText(pool: Pool, executionId: string, taskId: string): Promise<string | undefined> {
  const { rows } = await pool.query<{ task: string }>('SELECT task FROM session_tasks WHERE execution_id = $1 AND task_id = $2', [executionId, taskId]);
  return rows[0]?.task;
}

export async function markTaskRunning(pool: Pool, executionId: string, taskId: string, turnId: string): Promise<void> {
  await pool.query(
    `UPDATE session_tasks SET state = 'running', turn_id = $3 WHERE execution_id = $1 AND task_id = $2
       AND state IN ('queued', 'running')`,
    [executionId, taskId, turnId],
  );
}

/** Records terminal states; a terminal row is never changed again (a retried call changes nothing). */
export async function endTasks(pool: Pool, executionId: string, ends: readonly TaskEnd[]): Promise<void> {
  if (ends.length === 0) return;
  await pool.query(
    `UPDATE session_tasks t SET state = e.state, outcome = e.outcome, reason = e.reason, ended_at = now()
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) AS e(task_id, state, outcome, reason)
     WHERE t.execution_id = $1 AND t.task_id = e.task_id AND t.state IN ('queued', 'running')`,
    [executionId, ends.map((e) => e.taskId), ends.map((e) => e.state), ends.map((e) => e.outcome ?? null), ends.map((e) => e.reason ?? null)],
  );
}
