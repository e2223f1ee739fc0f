import type { TeamStatusView } from '../contract/messages';
import { teamWorkflowId } from '../contract/messages';
import { memberSessionId } from '../contract/member-session';
import { completion, type Reply } from '../test/helpers/model-stub';
import { knob, type Report } from './report';
import { startBenchStack } from './stack';
import { storeQueriesBy } from './throughput';

/**
 * What a team run costs while nothing happens to it: a Member runs `sleep` for BENCH_WAIT_SECONDS and, in that
 * window, the Coordinator's model calls (requests at the stub that offer `task_list`), the worker's PostgreSQL
 * statements (orchard_store_queries_total, by origin), and the team workflow's workflow tasks (WorkflowTaskCompleted
 * events of its history inside the window) are counted. The goal is 0, 0, 0 (invariant 13: no polling); whatever
 * is found is recorded, and store queries are broken down by where they came from.
 */
export async function benchWaiting(report: Report): Promise<void> {
  const seconds = knob('WAIT_SECONDS', 60);
  if (seconds === 0) {
    report.skip('waiting', 'BENCH_WAIT_SECONDS is 0');
    return;
  }
  const goal = 'Bench wait: run the long command';
  const coordinatorCalls: number[] = [];
  let commandAt: number | undefined;
  const bench = await startBenchStack((body: any): Reply => {
    const last = body.messages.at(-1);
    const coordinator = (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
    if (coordinator) {
      coordinatorCalls.push(performance.now());
      if (last.role === 'user' && String(last.content).startsWith(goal)) {
        return calls(['task_create', { taskId: 'wait', title: 'Run the long command', description: 'sleep', owner: 'worker' }], ['plan_approve', {}]);
      }
      return completion({ content: 'ok' });
    }
    if (last.role === 'tool') return completion({ content: 'done' });
    commandAt = performance.now();
    // Longer than the window, so the Member is still working when it closes; the team's cancel ends it.
    return calls(['bash', { command: `sleep ${seconds + 30}` }]);
  });
  const teamId = `bench-wait-${Date.now().toString(36)}`;
  try {
    const { client } = bench.orchard;
    await client.startTeam({ teamId, repo: bench.repo, goal, members: [{ memberId: 'worker', role: 'Worker' }] });
    const idle = (v: TeamStatusView) => v.status === 'waiting_for_org_event' && v.executions.some((e) => e.taskId === 'wait' && e.state === 'running');
    const deadline = Date.now() + 120_000;
    // The Member's command has started and the Coordinator has gone quiet: no new call for 2 s.
    for (;;) {
      const quietFor = performance.now() - Math.max(commandAt ?? Infinity, coordinatorCalls.at(-1) ?? 0);
      if (quietFor >= 2000 && idle(await client.teamStatus(teamId))) break;
      if (Date.now() > deadline) throw new Error(`bench: team ${teamId} never settled with its Member working`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const handle = client.temporal.workflow.getHandle(teamWorkflowId(teamId));
    const callsBefore = coordinatorCalls.length;
    const queriesBefore = await storeQueriesBy();
    const from = Date.now();
    // Nothing is asked of the stack in the window: no status, no query.
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const to = Date.now();
    const queriesAfter = await storeQueriesBy();
    const callsInWindow = coordinatorCalls.length - callsBefore;
    const events = ((await handle.fetchHistory()).events ?? []).filter((e) => {
      const at = Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6);
      return at >= from && at <= to;
    });
    const workflowTasks = events.filter((e) => e.workflowTaskCompletedEventAttributes).length;
    const byOrigin = new Map<string, number>();
    for (const after of queriesAfter) {
      const before = queriesBefore.find((b) => b.origin === after.origin && b.activity === after.activity)?.value ?? 0;
      const key = after.activity === 'none' ? after.origin : `${after.origin} (${after.activity})`;
      if (after.value > before) byOrigin.set(key, (byOrigin.get(key) ?? 0) + after.value - before);
    }
    const queries = [...byOrigin.values()].reduce((n, v) => n + v, 0);

    const window = `${seconds} s while a Member runs \`sleep\`; goal 0`;
    report.add({ section: 'waiting', name: "Coordinator's model calls", unit: 'count', value: callsInWindow, note: window });
    report.add({ section: 'waiting', name: "worker's store queries, every origin", unit: 'count', value: queries, note: window });
    for (const [origin, n] of [...byOrigin.entries()].sort((a, b) => b[1] - a[1])) {
      report.add({ section: 'waiting', name: `store queries from ${origin}`, unit: 'count', value: n, note: `${(n / seconds).toFixed(2)}/s` });
    }
    report.add({ section: 'waiting', name: 'team workflow tasks (WorkflowTaskCompleted)', unit: 'count', value: workflowTasks, note: window });
    report.add({ section: 'waiting', name: 'team history events, every kind', unit: 'count', value: events.length, note: window });
  } finally {
    // The Member first, so its session's end reaches a team that still runs; then the team.
    await bench.stop(async () => {
      await bench.orchard.client.cancel(memberSessionId(teamId, 'worker'), 'bench done').catch(() => undefined);
      await bench.orchard.client.cancelRun('team', teamId, { reason: 'bench done', timeoutMs: 30_000 }).catch(() => undefined);
    });
  }
}

let callSeq = 0;

/** A model reply that calls `list` tools in one step. */
function calls(...list: [string, unknown][]): Reply {
  return completion(
    {
      content: null,
      tool_calls: list.map(([name, args]) => ({ id: `call_${++callSeq}`, type: 'function', function: { name, arguments: JSON.stringify(args) } })),
    },
    'tool_calls',
  );
}
