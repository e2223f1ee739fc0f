import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { resolve } from 'node:path';
import { temporal } from '@temporalio/proto';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { metricsRegistry } from '../activities/metrics';
import { spawnerPid } from '../activities/bash/spawner';
import { parseLeaseHolder } from '../contract/ids';
import { memberSessionId } from '../contract/member-session';
import { makeFixtureRepo } from '../demos/fixture';
import { completion, type Reply } from '../test/helpers/model-stub';
import { knob, type Figure, type Report } from './report';
import { startBenchStack, type BenchStack } from './stack';

/**
 * A handoff on the real stack (Temporal dev server and the store, real sessions, bash and process groups, a stub
 * model that answers at once): at 1, 10 and 100 concurrent handoffs (BENCH_HANDOFF_CONCURRENCY), every writer of
 * every team runs a long command and all of them are reassigned at once. Measured per handoff from the moment the
 * user's `reassignTask` is sent: the fence committed (the receipt's row), the receipt `yielding` (its fact), the old
 * session's close (Temporal's close time of its execution chain's run), its process groups gone (the last `ended_at`
 * of the lease generation's groups) and the receipt `released` (its fact), against the 5 s SLO. The times come from
 * the store's rows and Temporal, not from polling, so they carry the clocks' resolution only.
 */
const SLO_MS = 5_000;
const SECTION = 'handoff';

/** The writer's command: a first line, then a long sleep in the same process group (cheap while 100 of them run). */
const WRITER_COMMAND = 'date +%s%N >> writer.log; sleep 600';

const call = (name: string, args: unknown, id: string) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } });

/** Tasks `<writer>-r<round>`, every writer's in round order, all created and the plan approved in the first turn. */
function teamModel(writers: readonly string[], rounds: number) {
  return (body: any): Reply => {
    const last = body.messages.at(-1);
    const coordinator = (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
    if (coordinator) {
      if (last.role === 'user' && String(last.content).startsWith('Write')) {
        const creates = [];
        for (let round = 1; round <= rounds; round++) {
          for (const w of writers) {
            creates.push(call('task_create', { taskId: `${w}-r${round}`, title: `Write ${w} ${round}`, description: 'write', owner: w }, `c-${w}-${round}`));
          }
        }
        return completion({ content: null, tool_calls: [...creates, call('plan_approve', {}, 'approve')] }, 'tool_calls');
      }
      return completion({ content: 'ok' });
    }
    if (last.role === 'tool') return completion({ content: 'done' });
    const writer = /^You are writer,/.test(String(body.messages[0].content));
    return completion({ content: null, tool_calls: [call('bash', { command: writer ? WRITER_COMMAND : 'date +%s%N >> other.log' }, 'b')] }, 'tool_calls');
  };
}

interface Sample {
  /** From the request sent: the fence committed, yielding recorded, old session closed, its groups gone, released. */
  fence: number;
  yielding: number;
  sessionClosed?: number;
  groupsGone?: number;
  released?: number;
  state: string;
  sloMissed: boolean;
}

export async function benchHandoff(report: Report): Promise<void> {
  const levels = (process.env.BENCH_HANDOFF_CONCURRENCY ?? '1,10,100')
    .split(',')
    .filter(Boolean)
    .map((x) => Number(x));
  if (levels.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`BENCH_HANDOFF_CONCURRENCY: expected positive integers, got ${levels.join(',')}`);
  const rounds = knob('HANDOFFS', 2);
  if (rounds < 1) return report.skip(SECTION, 'BENCH_HANDOFFS=0');
  const perTeam = Math.max(1, knob('HANDOFF_WRITERS', 10));
  const most = Math.max(...levels);
  // One stub for every team: the team's model is told apart by the goal's team id (the Coordinator) or the member.
  let current: (body: any) => Reply = () => completion({ content: 'ok' });
  const bench = await startBenchStack((body) => current(body), {
    modelTimeoutMs: 60_000,
    // Every writer's command runs at once, and each replacement's too: the host's command cap must not queue them.
    env: {
      ORCHARD_MAX_COMMANDS: process.env.ORCHARD_MAX_COMMANDS ?? String(2 * most + 8),
      ORCHARD_MAX_ACTIVITIES: process.env.ORCHARD_MAX_ACTIVITIES ?? String(4 * most + 100),
      // …nor the store's pool its board writes and lease checks (pool waits are recorded: see the figures).
      ...(process.env.BENCH_HANDOFF_STORE_CONNECTIONS ? { ORCHARD_STORE_CONNECTIONS: process.env.BENCH_HANDOFF_STORE_CONNECTIONS } : {}),
    },
  });
  const { orchard } = bench;
  const started: string[] = [];
  const slo = report.add({ section: SECTION, name: 'the SLO (reassign → released)', unit: 'ms', value: SLO_MS });
  try {
    for (const concurrency of levels) {
      const writersOf: string[][] = [];
      for (let left = concurrency; left > 0; left -= perTeam) {
        writersOf.push(Array.from({ length: Math.min(perTeam, left) }, (_, i) => `w${i + 1}`));
      }
      current = teamModel(
        Array.from({ length: Math.min(perTeam, concurrency) }, (_, i) => `w${i + 1}`),
        rounds,
      );
      const stamp = Date.now().toString(36);
      const teams = writersOf.map((writers, i) => ({ teamId: `bench-h${concurrency}-${stamp}-${i}`, writers }));
      const repo = makeFixtureRepo(resolve(orchard.config.stateDir, `bench-h${concurrency}-${stamp}`));
      // One team after another, each writing before the next starts: a hundred sessions preparing their worktrees in one
      // repository and starting their commands at once overloaded this machine before any handoff (writers' command
      // attempts lost on their heartbeat timeout, reported `unknown`). The handoffs themselves are still all at once.
      for (const team of teams) {
        started.push(team.teamId);
        await orchard.client.startTeam({
          teamId: team.teamId,
          repo,
          goal: 'Write logs',
          members: [...team.writers.map((memberId) => ({ memberId, role: 'Writer' })), { memberId: 'other', role: 'Other' }],
        });
        if (knob('HANDOFF_STAGGER', 1) > 0) await everyWriterWriting(orchard, [team]);
      }
      const samples: Sample[] = [];
      const poolWaiting: number[] = [];
      const statements = new Map<string, number>();
      const work = new Map<string, number>();
      const cpu = new Map<string, number>();
      const idleCpu = new Map<string, number>();
      let idleSpent = 0;
      let stopped: string | undefined;
      for (let round = 1; round <= rounds && stopped === undefined; round++) {
        const targets = await everyWriterWriting(orchard, teams);
        // What the stack spends while every writer's command runs and nothing else happens: the floor under the round.
        // Before the first round only: later rounds start beside the earlier rounds' replacements still working.
        const idleMs = knob('HANDOFF_IDLE_MS', 3000);
        if (idleMs > 0 && round === 1) {
          const idleFrom = cpuSample();
          await new Promise((r) => setTimeout(r, idleMs));
          cpuSpent(idleFrom, cpuSample(), idleCpu);
          idleSpent += idleMs;
        }
        // The worker's store pool while the handoffs run: how many callers wait for one of its connections.
        const sampler = setInterval(() => poolWaiting.push(orchard.pool.waitingCount), 50);
        const profiling = await profileMainThread(`handoff-${concurrency}-r${round}`);
        const statementsBefore = await storeStatements();
        const cpuBefore = cpuSample();
        const sent = await Promise.all(
          targets.map(async ({ teamId, taskId }) => {
            const t0 = Date.now();
            const receipt = await orchard.client.reassignTask(teamId, { taskId, newOwner: 'other', reason: 'bench' });
            return { teamId, receiptId: receipt.receiptId, t0 };
          }),
        );
        const settled = await receiptsSettled(
          orchard,
          sent.map((s) => s.receiptId),
        ).finally(() => clearInterval(sampler));
        const window = { from: Math.min(...sent.map((s) => s.t0)), to: Date.now() };
        cpuSpent(cpuBefore, cpuSample(), cpu);
        await profiling?.stop();
        const steps = await stepsIn(orchard, window);
        for (const [name, n] of steps) work.set(name, (work.get(name) ?? 0) + n);
        for (const [activity, n] of await storeStatements())
          statements.set(activity, (statements.get(activity) ?? 0) + n - (statementsBefore.get(activity) ?? 0));
        const measured: { sent: (typeof sent)[number]; sample: Sample }[] = [];
        for (const s of sent) {
          const sample = await breakdown(orchard, s, settled.get(s.receiptId)!);
          samples.push(sample);
          measured.push({ sent: s, sample });
          if (sample.state !== 'released') stopped = `receipt ${s.receiptId} settled ${sample.state}`;
        }
        if (knob('HANDOFF_TRACE', 0) > 0) {
          const slowest = measured.reduce((a, b) => ((b.sample.released ?? Infinity) > (a.sample.released ?? Infinity) ? b : a));
          await trace(orchard, slowest.sent, settled.get(slowest.sent.receiptId)!);
        }
      }
      // Stop every team before the next level (and before the stack stops): nothing may be left dispatching.
      await Promise.all(teams.map(({ teamId }) => orchard.client.teamLifecycle(teamId, 'archive', { reason: 'bench done' }).catch(() => undefined)));
      recordLevel(report, slo, concurrency, samples, stopped);
      const total = [...statements.values()].reduce((a, b) => a + b, 0);
      const most = [...statements].sort((a, b) => b[1] - a[1]).slice(0, 4);
      report.add({
        section: SECTION,
        name: `${concurrency} concurrent: store statements per handoff (while the round settled)`,
        unit: 'count',
        value: total / Math.max(1, samples.length),
        n: samples.length,
        note: most.map(([activity, n]) => `${activity} ${(n / Math.max(1, samples.length)).toFixed(1)}`).join(', '),
      });
      const cpuTotal = [...cpu.values()].reduce((a, b) => a + b, 0);
      report.add({
        section: SECTION,
        name: `${concurrency} concurrent: CPU time per handoff (every process of the stack, while the round settled)`,
        unit: 'ms',
        value: cpuTotal / Math.max(1, samples.length),
        n: samples.length,
        note: [...cpu]
          .sort((a, b) => b[1] - a[1])
          .map(([name, ms]) => `${name} ${(ms / Math.max(1, samples.length)).toFixed(1)}`)
          .join(', '),
      });
      if (idleSpent > 0) {
        report.add({
          section: SECTION,
          name: `${concurrency} concurrent: CPU time per second before the first round (every writer's command running, nothing else)`,
          unit: 'ms',
          value: ([...idleCpu.values()].reduce((a, b) => a + b, 0) * 1000) / idleSpent,
          note: [...idleCpu]
            .sort((a, b) => b[1] - a[1])
            .map(([name, ms]) => `${name} ${((ms * 1000) / idleSpent).toFixed(0)}`)
            .join(', '),
        });
      }
      for (const kind of ['workflow tasks', 'activities', 'history events', 'search attribute upserts'] as const) {
        const rows = [...work].filter(([name]) => name.startsWith(`${kind}:`));
        const total = rows.reduce((a, [, n]) => a + n, 0);
        report.add({
          section: SECTION,
          name: `${concurrency} concurrent: ${kind} per handoff (every workflow, while the round settled)`,
          unit: 'count',
          value: total / Math.max(1, samples.length),
          n: samples.length,
          note: rows
            .sort((a, b) => b[1] - a[1])
            .slice(0, 6)
            .map(([name, n]) => `${name.slice(kind.length + 1)} ${(n / Math.max(1, samples.length)).toFixed(1)}`)
            .join(', '),
        });
      }
      report.samples(SECTION, `${concurrency} concurrent: store pool callers waiting for a connection (every 50 ms)`, poolWaiting, 'count', {
        note: `pool of ${orchard.pool.options.max}`,
      });
    }
  } finally {
    const cancelAll = async () => {
      for (const teamId of started) {
        await orchard.client.cancelRun('team', teamId, { reason: 'bench done', timeoutMs: 60_000 }).catch(() => undefined);
      }
    };
    await bench.stop(cancelAll, Math.max(1, started.length) * 60_000);
  }
}

type Orchard = BenchStack['orchard'];

/** The worker's `orchard_store_queries_total` (it runs in this process), summed by activity type (or origin). */
async function storeStatements(): Promise<Map<string, number>> {
  const metric = metricsRegistry.getSingleMetric('orchard_store_queries_total');
  const out = new Map<string, number>();
  for (const v of metric ? (await metric.get()).values : []) {
    const label = v.labels.activity !== 'none' ? String(v.labels.activity) : String(v.labels.origin);
    out.set(label, (out.get(label) ?? 0) + v.value);
  }
  return out;
}

/**
 * CPU time (user + system, ms) so far of the stack's processes, each keyed by process (or thread) and start time: this
 * process by thread (`worker:main`: activities, the client and the stub model; the workflow thread; the SDK core's
 * tokio threads; libuv's pool), its spawner, the processes either started and reaped (bash, bwrap, git: `cutime`) or
 * still runs, the Temporal dev server it runs, and PostgreSQL's processes (every one on the machine: the bench's
 * database is the busy one).
 */
function cpuSample(): Map<string, { group: string; ms: number }> {
  const tick = 1000 / 100;
  const out = new Map<string, { group: string; ms: number }>();
  const read = (path: string) => {
    try {
      const text = readFileSync(path, 'utf8');
      const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
      return {
        comm: text.slice(text.indexOf('(') + 1, text.lastIndexOf(')')),
        ppid: Number(fields[1]),
        own: (Number(fields[11]) + Number(fields[12])) * tick,
        reaped: (Number(fields[13]) + Number(fields[14])) * tick,
        started: fields[19],
      };
    } catch {
      return undefined; // it ended meanwhile
    }
  };
  out.set('reaped', { group: 'commands', ms: read('/proc/self/stat')!.reaped });
  for (const tid of readdirSync('/proc/self/task')) {
    const t = read(`/proc/self/task/${tid}/stat`);
    if (t) out.set(`thread ${tid}@${t.started}`, { group: `worker:${Number(tid) === process.pid ? 'main' : t.comm.replace(/[-\s]?\d+$/, '')}`, ms: t.own });
  }
  // The worker's commands are the spawner's children (activities/bash/spawner.ts): what it reaped counts as commands too.
  const spawner = spawnerPid();
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p) && Number(p) !== process.pid)) {
    const p = read(`/proc/${pid}/stat`);
    if (p && Number(pid) === spawner) out.set(`spawner-reaped ${pid}@${p.started}`, { group: 'commands', ms: p.reaped });
    const group =
      p?.comm === 'temporal' && p.ppid === process.pid
        ? 'temporal'
        : p?.comm.startsWith('postgres')
          ? 'postgres'
          : Number(pid) === spawner
            ? 'spawner'
            : p?.ppid === process.pid || (spawner !== undefined && p?.ppid === spawner)
              ? 'commands'
              : undefined;
    if (group) out.set(`process ${pid}@${p!.started}`, { group, ms: p!.own });
  }
  return out;
}

/** What each group spent between two samples (a process that ended in between counts until the last sample that saw it). */
function cpuSpent(before: ReturnType<typeof cpuSample>, after: ReturnType<typeof cpuSample>, into: Map<string, number>): void {
  for (const [key, { group, ms }] of after) into.set(group, (into.get(group) ?? 0) + ms - (before.get(key)?.ms ?? 0));
}

/**
 * The work every workflow of the stack did in a window, from their histories: workflow tasks completed, history events
 * and search attribute upserts (each also a write of the visibility store) by workflow type, and activities scheduled
 * by activity type. On a saturated machine this, not any one wait, sets the pace.
 */
async function stepsIn(orchard: Orchard, window: { from: number; to: number }): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const count = (name: string) => out.set(name, (out.get(name) ?? 0) + 1);
  const since = new Date(window.from).toISOString();
  const workflows: { workflowId: string; runId: string; type: string }[] = [];
  for await (const wf of orchard.client.temporal.workflow.list({ query: `ExecutionStatus = 'Running' OR CloseTime > '${since}'` })) {
    workflows.push({ workflowId: wf.workflowId, runId: wf.runId, type: wf.type });
  }
  for (const wf of workflows) {
    const history = await orchard.client.temporal.workflow
      .getHandle(wf.workflowId, wf.runId)
      .fetchHistory()
      .catch(() => undefined);
    for (const e of history?.events ?? []) {
      const at = Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6);
      if (at < window.from || at > window.to) continue;
      count(`history events:${wf.type}`);
      if (e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES) count(`search attribute upserts:${wf.type}`);
      if (e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) count(`workflow tasks:${wf.type}`);
      const activity = e.activityTaskScheduledEventAttributes?.activityType?.name;
      if (activity) count(`activities:${activity}`);
    }
  }
  return out;
}

/**
 * BENCH_HANDOFF_PROFILE=<dir>: a CPU profile of this process's main thread (where the worker's activities and the
 * SDK's bridge run) while a round's handoffs settle, written as <dir>/<name>.cpuprofile (Chrome DevTools opens it).
 */
async function profileMainThread(name: string): Promise<{ stop: () => Promise<void> } | undefined> {
  const dir = process.env.BENCH_HANDOFF_PROFILE;
  if (!dir) return undefined;
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<any>((done, fail) => session.post(method, params ?? {}, (err, answer) => (err ? fail(err) : done(answer))));
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 1000 });
  await post('Profiler.start');
  return {
    stop: async () => {
      const { profile } = await post('Profiler.stop');
      session.disconnect();
      mkdirSync(dir, { recursive: true });
      writeFileSync(resolve(dir, `${name}.cpuprofile`), JSON.stringify(profile));
      console.log(`handoff: main-thread CPU profile in ${resolve(dir, `${name}.cpuprofile`)}`);
    },
  };
}

/**
 * Every writer runs one of its tasks (a member takes its pending tasks in no fixed order) and its command has a live
 * process group (it is writing): answers which task each writer runs.
 */
async function everyWriterWriting(
  orchard: Orchard,
  teams: readonly { teamId: string; writers: readonly string[] }[],
): Promise<{ teamId: string; writer: string; taskId: string }[]> {
  const deadline = Date.now() + 300_000;
  for (;;) {
    // From the board, not the runs' status queries: a hundred writers' teams asked ten times a second load the worker
    // the handoffs are about to be measured on.
    const running = await orchard.pool.query<{ team_id: string; task_id: string; owner: string }>(
      `SELECT team_id, task_id, owner FROM team_tasks WHERE team_id = ANY($1) AND status = 'in_progress'`,
      [teams.map((t) => t.teamId)],
    );
    const open = await orchard.pool.query<{ holder: string }>(
      `SELECT l.holder FROM lease_process_groups g JOIN worktree_leases l ON l.worktree = g.worktree AND l.generation = g.generation AND l.state = 'held'
        WHERE g.ended_at IS NULL`,
    );
    // A holder is `<namespace>/session/<id>@<firstRunId>`.
    const writing = new Set(open.rows.map((r) => /session\/([^@]+)@/.exec(r.holder)?.[1]));
    const targets = teams.flatMap(({ teamId, writers }) =>
      writers.map((writer) => ({
        teamId,
        writer,
        taskId: writing.has(memberSessionId(teamId, writer)) ? running.rows.find((r) => r.team_id === teamId && r.owner === writer)?.task_id : undefined,
      })),
    );
    const waiting = targets.filter((t) => t.taskId === undefined);
    if (waiting.length === 0) return targets.map((t) => ({ ...t, taskId: t.taskId! }));
    if (Date.now() > deadline) {
      for (const teamId of [...new Set(waiting.map((w) => w.teamId))]) await describeStuck(orchard, teamId);
      for (const w of waiting.slice(0, 5)) await describeStuck(orchard, w.teamId, memberSessionId(w.teamId, w.writer));
      throw new Error(`bench: ${waiting.length} writers never started (${waiting[0].writer} of ${waiting[0].teamId})`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Waits until every receipt has left `requested`/`yielding` in the store; answers each one's row. */
async function receiptsSettled(orchard: Orchard, receiptIds: readonly string[]) {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const rows = await orchard.pool.query<{ receipt_id: string; state: string; slo_missed: boolean; created_at: Date; lease: any; session_id: string }>(
      `SELECT receipt_id, state, slo_missed, created_at, lease, session_id FROM team_handoff_receipts WHERE receipt_id = ANY($1)`,
      [receiptIds],
    );
    if (rows.rows.length === receiptIds.length && rows.rows.every((r) => !['requested', 'yielding'].includes(r.state))) {
      return new Map(rows.rows.map((r) => [r.receipt_id, r]));
    }
    if (Date.now() > deadline) throw new Error('bench: receipts did not settle in 120 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** One handoff's steps, each as milliseconds from the request sent, from the store's rows and Temporal. */
async function breakdown(
  orchard: Orchard,
  sent: { teamId: string; receiptId: string; t0: number },
  row: { state: string; slo_missed: boolean; created_at: Date; lease: any; session_id: string },
): Promise<Sample> {
  const facts = await orchard.pool.query<{ kind: string; at: Date }>(
    `SELECT kind, min(created_at) AS at FROM team_facts WHERE team_id = $1 AND detail->>'receiptId' = $2 GROUP BY kind`,
    [sent.teamId, sent.receiptId],
  );
  const fact = (kind: string) => facts.rows.find((f) => f.kind === kind)?.at.getTime();
  const since = (at: number | undefined) => (at === undefined ? undefined : at - sent.t0);
  let groupsGone: number | undefined;
  let sessionClosed: number | undefined;
  if (row.lease) {
    const groups = await orchard.pool.query<{ ended: Date | null; open: string }>(
      `SELECT max(ended_at) AS ended, count(*) FILTER (WHERE ended_at IS NULL) AS open FROM lease_process_groups WHERE worktree = $1 AND generation = $2`,
      [row.lease.worktree, row.lease.generation],
    );
    if (Number(groups.rows[0].open) === 0 && groups.rows[0].ended) groupsGone = groups.rows[0].ended.getTime();
    // The old execution chain's first run (a bench session never continues-as-new while it writes one command).
    const chain = row.lease.holder ? parseLeaseHolder(row.lease.holder)?.firstRunId : undefined;
    if (chain) {
      const described = await orchard.client.temporal.workflow
        .getHandle(`session/${row.session_id}`, chain)
        .describe()
        .catch(() => undefined);
      sessionClosed = described?.closeTime?.getTime();
    }
  }
  return {
    fence: row.created_at.getTime() - sent.t0,
    yielding: since(fact('handoff_yielding')) ?? NaN,
    sessionClosed: since(sessionClosed),
    groupsGone: since(groupsGone),
    released: since(fact('handoff_released')),
    state: row.state,
    sloMissed: row.slo_missed,
  };
}

/**
 * BENCH_HANDOFF_TRACE=1: the slowest handoff of each round as its workflows' histories tell it — every event of the
 * team run and of the old session from the request on, as milliseconds since the request was sent.
 */
async function trace(orchard: Orchard, sent: { teamId: string; receiptId: string; t0: number }, row: { lease: any; session_id: string }): Promise<void> {
  const chain = row.lease?.holder ? parseLeaseHolder(row.lease.holder)?.firstRunId : undefined;
  const lines: [number, string][] = [];
  for (const [label, handle] of [
    ['team', orchard.client.temporal.workflow.getHandle(`team/${sent.teamId}`)],
    ['session', orchard.client.temporal.workflow.getHandle(`session/${row.session_id}`, chain)],
  ] as const) {
    const history = await handle.fetchHistory();
    for (const e of history.events ?? []) {
      const at = Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6) - sent.t0;
      if (at < -50) continue;
      const attrs = e.activityTaskScheduledEventAttributes?.activityType?.name ?? e.workflowExecutionSignaledEventAttributes?.signalName ?? '';
      const type = (temporal.api.enums.v1.EventType[e.eventType ?? 0] ?? String(e.eventType)).replace(/^EVENT_TYPE_/, '');
      lines.push([at, `${label.padEnd(7)} ${type} ${attrs}`]);
    }
  }
  console.log(`trace of ${sent.receiptId} (${sent.teamId}):`);
  for (const [at, what] of lines.sort((a, b) => a[0] - b[0]).filter(([at]) => at < 15_000)) console.log(`  ${String(at).padStart(6)} ms  ${what}`);
}

/** What a team that stopped dispatching is doing, as Temporal tells it: its status, pending activities, last events. */
async function describeStuck(orchard: Orchard, teamId: string, sessionId?: string): Promise<void> {
  const handle = orchard.client.temporal.workflow.getHandle(sessionId ? `session/${sessionId}` : `team/${teamId}`);
  const d = await handle.describe().catch((err: unknown) => ({ error: String(err) }));
  if ('error' in d) return void console.log(`${handle.workflowId}: not described (${d.error})`);
  console.log(`${handle.workflowId}: ${d.status.name}, run ${d.runId}, history ${d.historyLength} events`);
  if (!sessionId) {
    // The run's own view: what it holds its receipts and executions to be, and what waits (the store says the rest).
    const v = await orchard.client.teamStatus(teamId).catch((err: unknown) => ({ error: String(err) }));
    if ('error' in v) console.log(`  status not read (${v.error})`);
    else {
      console.log(`  status ${v.status}, plan approved ${v.planApproved}, budget ${JSON.stringify(v.budget ?? null)}, waiting ${JSON.stringify(v.waiting)}`);
      console.log(`  receipts ${v.receipts.map((r) => `${r.receiptId.replace(`handoff-${teamId}-`, '')}:${r.state}`).join(' ')}`);
      console.log(`  executions ${v.executions.map((e) => `${e.taskId}/${e.memberId}:${e.state}`).join(' ')}`);
    }
  }
  const task = d.raw.pendingWorkflowTask;
  if (task) console.log(`  pending workflow task: state ${task.state}, attempt ${task.attempt}, started ${task.startedTime?.seconds ?? '-'}`);
  for (const a of d.raw.pendingActivities ?? []) {
    console.log(`  pending ${a.activityType?.name} attempt ${a.attempt} state ${a.state}${a.lastFailure ? `: ${a.lastFailure.message}` : ''}`);
  }
  const fetched = await handle.fetchHistory();
  const dump = process.env.BENCH_HANDOFF_DUMP;
  if (dump) {
    mkdirSync(dump, { recursive: true });
    writeFileSync(resolve(dump, `${handle.workflowId.replace(/\//g, '_')}.json`), historyToJSON(fetched));
  }
  const events = fetched.events ?? [];
  for (const e of events.slice(-8)) {
    const type = (temporal.api.enums.v1.EventType[e.eventType ?? 0] ?? String(e.eventType)).replace(/^EVENT_TYPE_/, '');
    const failure = e.workflowTaskFailedEventAttributes?.failure?.message ?? e.activityTaskFailedEventAttributes?.failure?.message ?? '';
    const name = e.activityTaskScheduledEventAttributes?.activityType?.name ?? e.workflowExecutionSignaledEventAttributes?.signalName ?? '';
    console.log(`  ${e.eventId} ${type} ${name} ${failure.slice(0, 300)}`);
  }
}

function recordLevel(report: Report, slo: Figure, concurrency: number, samples: readonly Sample[], stopped: string | undefined): void {
  const note = stopped ? `stopped early: ${stopped}` : undefined;
  const defined = (xs: (number | undefined)[]) => xs.filter((x): x is number => x !== undefined && Number.isFinite(x));
  const released = defined(samples.map((s) => s.released));
  const total = report.samples(SECTION, `${concurrency} concurrent: reassign → receipt released`, released, 'ms', { note });
  report.against(total, slo);
  report.samples(SECTION, `${concurrency} concurrent: fence committed`, defined(samples.map((s) => s.fence)));
  report.samples(SECTION, `${concurrency} concurrent: receipt yielding`, defined(samples.map((s) => s.yielding)));
  report.samples(SECTION, `${concurrency} concurrent: old session closed`, defined(samples.map((s) => s.sessionClosed)));
  report.samples(SECTION, `${concurrency} concurrent: old process groups gone`, defined(samples.map((s) => s.groupsGone)));
  report.samples(SECTION, `${concurrency} concurrent: session closed → released`, defined(samples.map((s) => (s.released ?? NaN) - (s.sessionClosed ?? NaN))));
  const misses = samples.filter((s) => s.sloMissed || s.released === undefined || s.released > SLO_MS).length;
  report.add({ section: SECTION, name: `${concurrency} concurrent: SLO misses`, unit: 'count', value: misses, n: samples.length, note: `SLO ${SLO_MS} ms` });
  const unsettled = samples.filter((s) => s.state !== 'released').length;
  if (unsettled > 0)
    report.add({ section: SECTION, name: `${concurrency} concurrent: not released (timeout/unknown/failed)`, unit: 'count', value: unsettled });
}
