import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import type { Pool, PoolClient } from 'pg';
import { OpenAICompatibleProvider } from '../../activities/model/openai';
import type { TeamActivityHooks } from '../../activities/team';
import { teamWorkflowId, type StartTeamInput, type TeamStatusView } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { calls, final, gate, lastUserText } from './fleet-model';
import { completion, stubModel, type ModelStub, type Reply } from './model-stub';
import { makeRepo, startOrchard, testPool, uniqueId, type TestOrchard } from './orchard';
import { waitFor } from './wait';

/**
 * A team run against the real dev server, Postgres, sessions and bash, with the model played over HTTP:
 *
 * - The Coordinator is scripted by the test through user messages: `script <nonce> <json>` makes it call the
 *   tools listed in the JSON (one step), and end its turn once it has seen their results; `script()` returns those
 *   results (what the model was shown). The goal is such a script too (the plan). Any other wake is answered
 *   with a plain "noted" (no tool call): the Coordinator never completes or re-plans on its own.
 * - A Member does what the test set for its task id (read from the brief it was sent, `Task <id>: …`):
 *   `finish` (answers done), `fail` (its model refuses every request: the turn fails), `write` (a long bash
 *   writer appending timestamps to `<id>.log` in its worktree, until stopped), `gate` (its answer is held until
 *   the test opens the task's gate), `{ commit: { path: content } }` (writes the files and commits them, then done).
 */
export type Work = 'finish' | 'fail' | 'write' | 'gate' | { readonly commit: Readonly<Record<string, string>> };
export type Call = [string, unknown];

const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const taskOf = (body: any) => /^Task (\S+):/.exec(lastUserText(body))?.[1];

interface Gate {
  /** Resolves when the Member's model request for the task has arrived (and is being held). */
  arrived: Promise<void>;
  open(): void;
}

export interface TeamHarness {
  orchard: TestOrchard;
  stub: ModelStub;
  teamId: string;
  repo: string;
  /** The Coordinator calls `list` in one step of a new turn; resolves with the tool results it was shown. */
  script(list: Call[], options?: { before?: () => Promise<void> }): Promise<string[]>;
  status(): Promise<TeamStatusView>;
  until(what: string, probe: (v: TeamStatusView) => boolean, timeoutMs?: number): Promise<TeamStatusView>;
  gate(taskId: string): Gate;
  /** Waits until the Member's bash writer for `taskId` is writing, and returns its log's path. */
  writing(taskId: string, memberId: string): Promise<string>;
  /**
   * Marks one process group of the member's current lease as not verified gone (as the reaper leaves one it
   * could not kill): its old runtime is not quiescent until `unstick()`.
   */
  stick(memberId: string): Promise<{ unstick(): Promise<void> }>;
  certificates(): Promise<any[]>;
  count(sql: string, params?: unknown[]): Promise<number>;
  history(): Promise<any[]>;
}

export async function startScriptedTeam(
  t: ExecutionContext,
  options: {
    members?: string[];
    plan: Call[];
    work?: Record<string, Work>;
    handoff?: StartTeamInput['handoff'];
    verify?: StartTeamInput['verify'];
    teamHooks?: TeamActivityHooks;
    /** Where the workers reach PostgreSQL (a fault test's proxy); the test reads it directly. */
    databaseUrl?: string;
    /** Another Temporal server's `host:port` (the Web UI test's, which serves a UI); the run's server by default. */
    temporalAddress?: string;
    /** The team's repository (a fresh one by default). */
    repo?: string;
    /** Runs before the Coordinator's plain "noted" answer goes out (a test holds a turn here). */
    beforeNoted?: () => Promise<void>;
  },
): Promise<TeamHarness> {
  // A team test that hangs (an update that never answers, say) fails on its own once it has made no assertion for
  // this long (ava restarts the timer at each assertion), instead of holding an ava worker until the whole run's
  // deadline and leaving the files after it unrun.
  // (A `before` hook's context has no timeout of its own: there ava's run-wide timeout applies.)
  if (typeof t.timeout === 'function') t.timeout(TEAM_TEST_TIMEOUT_MS, 'a team test made no assertion for ORCHARD_TEST_TEAM_TIMEOUT_MS');
  const work = options.work ?? {};
  const gates = new Map<string, Gate & { promise: Promise<void>; arrive(): void }>();
  const gateOf = (taskId: string) => {
    let g = gates.get(taskId);
    if (!g) {
      const held = gate();
      const came = gate();
      g = { promise: held.promise, open: held.open, arrived: came.promise, arrive: came.open };
      gates.set(taskId, g);
    }
    return g;
  };
  const scripts = new Map<string, { list: Call[]; before?: () => Promise<void>; done(results: string[]): void }>();

  async function coordinator(body: any): Promise<Reply> {
    const messages: any[] = body.messages;
    const lastUser = messages.map((m) => m.role).lastIndexOf('user');
    const text = String(messages[lastUser].content);
    const results = messages
      .slice(lastUser + 1)
      .filter((m) => m.role === 'tool')
      .map((m) => String(m.content));
    const match = /^script (\S+) /.exec(text);
    const script = match ? scripts.get(match[1]) : undefined;
    if (!script) {
      await options.beforeNoted?.();
      return final('noted');
    }
    if (results.length === 0) {
      await script.before?.();
      return calls(...script.list);
    }
    script.done(results);
    return final(`script ${match![1]} done`);
  }

  async function member(body: any): Promise<Reply> {
    const taskId = taskOf(body);
    const what = (taskId && work[taskId]) ?? 'finish';
    if (what === 'fail') return { status: 400, body: { error: { message: 'bad request' } } };
    if (body.messages.at(-1).role === 'tool') return completion({ content: `done ${taskId}` });
    if (typeof what === 'object') {
      const files = Object.entries(what.commit);
      return calls(...files.map(([path, content]): Call => ['write_file', { path, content }]), [
        'git_commit',
        { message: `${taskId}: ${files.map(([p]) => p).join(', ')}`, paths: files.map(([p]) => p) },
      ]);
    }
    if (what === 'write') return calls(['bash', { command: `for i in $(seq 1 400); do date +%s%N >> ${taskId}.log; sleep 0.05; done` }]);
    if (what === 'gate') {
      const g = gateOf(taskId!);
      g.arrive();
      await g.promise;
    }
    return completion({ content: `done ${taskId}` });
  }

  const stub = await stubModel(t, (body) => (isCoordinator(body) ? coordinator(body) : member(body)));
  const orchard = await startOrchard(t, {
    defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }),
    teamHooks: options.teamHooks,
    databaseUrl: options.databaseUrl,
    temporalAddress: options.temporalAddress,
  });
  const teamId = uniqueId('team');
  const repo = options.repo ?? makeRepo();
  const members = options.members ?? ['implementer', 'reviewer'];

  const status = () => orchard.client.teamStatus(teamId);
  const until: TeamHarness['until'] = async (what, probe, timeoutMs = TEAM_WAIT_MS) => {
    try {
      return await waitFor(
        async () => {
          const v = await status();
          return probe(v) ? v : undefined;
        },
        timeoutMs,
        what,
      );
    } catch (err) {
      // Say where the team stood, for whoever reads the failure.
      throw new Error(`${(err as Error).message}; status: ${JSON.stringify(await status().catch(() => undefined))}`);
    }
  };

  let nonces = 0;
  const register = (list: Call[], before?: () => Promise<void>) => {
    const nonce = `s${++nonces}`;
    const results = new Promise<string[]>((resolve) => scripts.set(nonce, { list, before, done: resolve }));
    return { nonce, text: `script ${nonce} ${JSON.stringify(list)}`, results };
  };
  const answered = async (nonce: string, results: Promise<string[]>) => {
    // Unref'd: a script a test leaves unanswered on purpose (its run ended) does not keep the test file alive.
    const shown = await Promise.race([
      results,
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`script ${nonce} not answered`)), 90_000).unref()),
    ]);
    // The turn is over once its final answer is recorded.
    await until(`the turn of script ${nonce}`, (v) => v.turns.some((turn) => turn.finalExcerpt === `script ${nonce} done`));
    return shown;
  };

  const plan = register(options.plan);
  await orchard.client.startTeam({
    teamId,
    repo,
    goal: plan.text,
    members: members.map((memberId) => ({ memberId, role: memberId[0].toUpperCase() + memberId.slice(1) })),
    handoff: options.handoff,
    verify: options.verify,
  });
  await answered(plan.nonce, plan.results);

  return {
    orchard,
    stub,
    teamId,
    repo,
    status,
    until,
    async script(list, scriptOptions = {}) {
      const s = register(list, scriptOptions.before);
      await orchard.client.teamMessage(teamId, { text: s.text });
      return answered(s.nonce, s.results);
    },
    gate: gateOf,
    async writing(taskId, memberId) {
      return waitFor(
        async () => {
          const s = await orchard.client.status(memberSessionId(teamId, memberId)).catch(() => undefined);
          const path = s?.worktree ? join(s.worktree, `${taskId}.log`) : undefined;
          return path && existsSync(path) && readFileSync(path, 'utf8').split('\n').length > 3 ? path : undefined;
        },
        TEAM_WAIT_MS,
        `${memberId} writing ${taskId}`,
      );
    },
    stick: (memberId) => stickRuntime(orchard, memberSessionId(teamId, memberId)),
    certificates: async () =>
      (await orchard.pool.query(`SELECT generation, work_revision, certificate FROM team_certificates WHERE team_id = $1`, [teamId])).rows,
    count: async (sql, params = [teamId]) => Number((await orchard.pool.query(sql, params)).rows[0].n),
    history: async () => (await orchard.temporal.workflow.getHandle(teamWorkflowId(teamId)).fetchHistory()).events ?? [],
  };
}

/**
 * Marks one process group of the session's current lease as not verified gone (as the reaper leaves one it could
 * not kill, on another host): its runtime is not quiescent until `unstick()`.
 */
export async function stickRuntime(orchard: { pool: Pool }, sessionId: string): Promise<{ unstick(): Promise<void> }> {
  const holder = (
    await orchard.pool.query(`SELECT worktree, generation FROM worktree_leases WHERE holder LIKE $1 AND state = 'held'`, [`%session/${sessionId}@%`])
  ).rows[0];
  if (!holder) throw new Error(`no held lease of ${sessionId}`);
  const callKey = uniqueId('stuck');
  await orchard.pool.query(`INSERT INTO lease_process_groups (worktree, generation, host, pgid, call_key) VALUES ($1, $2, 'elsewhere', 999999, $3)`, [
    holder.worktree,
    holder.generation,
    callKey,
  ]);
  return {
    unstick: async () => {
      await orchard.pool.query(`UPDATE lease_process_groups SET ended_at = now() WHERE call_key = $1`, [callKey]);
    },
  };
}

/** The activity type of each scheduled activity in a history, by its scheduled event id. */
export function activityTypes(events: any[]): Map<string, string> {
  const types = new Map<string, string>();
  for (const e of events) {
    const scheduled = e.activityTaskScheduledEventAttributes;
    if (scheduled) types.set(String(e.eventId), scheduled.activityType?.name);
  }
  return types;
}

/**
 * Holds the team's run row locked (the lock every board write takes first), from a connection of its own, so
 * that writers arriving meanwhile queue up behind it in arrival order; `release()` lets them through.
 */
export async function holdRunRow(t: ExecutionContext, teamId: string) {
  const pool: Pool = await testPool(t);
  const client: PoolClient = await pool.connect();
  await client.query('BEGIN');
  await client.query('SELECT 1 FROM team_runs WHERE team_id = $1 FOR UPDATE', [teamId]);
  const pid = Number((await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
  let released = false;
  const release = async () => {
    if (released) return;
    released = true;
    await client.query('ROLLBACK');
    client.release();
  };
  t.teardown(release);
  return {
    pid,
    /** Waits until `n` backends are queued behind this lock (directly or behind one another). */
    queued: (n: number) => waitFor(async () => (await waitingBehind(pool, pid)).length >= n, 30_000, `${n} writer(s) queued behind the run row`),
    release,
  };
}

/** Backends waiting on a lock held by `pid`, directly or through another waiter. */
export async function waitingBehind(pool: Pool, pid: number): Promise<number[]> {
  const { rows } = await pool.query(`SELECT pid, pg_blocking_pids(pid) AS blockers FROM pg_stat_activity WHERE wait_event_type = 'Lock'`);
  const behind = new Set<number>([pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const r of rows) {
      if (!behind.has(r.pid) && (r.blockers as number[]).some((b) => behind.has(b))) {
        behind.add(r.pid);
        grew = true;
      }
    }
  }
  behind.delete(pid);
  return [...behind];
}

/**
 * Waits until the team's `status` satisfies `probe` and returns that view; on a timeout the error carries the
 * last status, for whoever reads the failure.
 */
/**
 * How long a team test waits for a state by default: generous, since a full run on a loaded 2-core machine starts
 * several teams at once (each member a session, each command sandboxed and verified); a passing wait ends at once.
 */
export const TEAM_WAIT_MS = 150_000;
/** How long a team test may go without an assertion (ORCHARD_TEST_TEAM_TIMEOUT_MS): twice the longest wait. */
const TEAM_TEST_TIMEOUT_MS = Number(process.env.ORCHARD_TEST_TEAM_TIMEOUT_MS ?? 2 * TEAM_WAIT_MS);

export async function untilTeam(
  orchard: TestOrchard,
  teamId: string,
  what: string,
  probe: (v: TeamStatusView) => boolean,
  timeoutMs = TEAM_WAIT_MS,
): Promise<TeamStatusView> {
  try {
    return await waitFor(
      async () => {
        const v = await orchard.client.teamStatus(teamId);
        return probe(v) ? v : undefined;
      },
      timeoutMs,
      what,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; status: ${JSON.stringify(await orchard.client.teamStatus(teamId).catch(() => 'unavailable'))}`);
  }
}

const agentOf = (body: any) => /^You are (\S+),/.exec(String(body.messages[0].content))?.[1];

/**
 * A team model for handoff tests: the Coordinator plans one task (`implement`, for the implementer) on the goal
 * "Build …" and approves it; the implementer writes a timestamp per line into `old.log` until it is stopped (20 s),
 * any other Member writes three into `new.log`.
 */
export function writerTeamModel(body: any): Reply {
  if (isCoordinator(body)) {
    const last = body.messages.at(-1);
    if (last.role === 'user' && String(last.content).startsWith('Build')) {
      return calls(
        ['task_create', { taskId: 'implement', title: 'Implement', description: 'write the evaluator', owner: 'implementer' }],
        ['plan_approve', {}],
      );
    }
    return final('ok');
  }
  if (body.messages.at(-1).role === 'tool') return completion({ content: 'done' });
  if (agentOf(body) === 'implementer') return calls(['bash', { command: 'for i in $(seq 1 400); do date +%s%N >> old.log; sleep 0.05; done' }]);
  return calls(['bash', { command: 'for i in 1 2 3; do date +%s%N >> new.log; done' }]);
}

/** The timestamps (ns) a writer left in a log, one per line. */
export const stamps = (path: string): bigint[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => BigInt(line));

/**
 * A team of an implementer and a reviewer on a fresh repository, its model played by `model` (writerTeamModel by
 * default) over HTTP; not started yet: `start()` starts it (a fault test starts it during an outage).
 */
export async function twoMemberTeam(
  t: ExecutionContext,
  options: { model?: (body: any) => Reply; goal?: string; handoff?: StartTeamInput['handoff']; databaseUrl?: string } = {},
) {
  const stub = await stubModel(t, options.model ?? writerTeamModel);
  const orchard = await startOrchard(t, {
    defaultProvider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }),
    databaseUrl: options.databaseUrl,
  });
  const teamId = uniqueId('team');
  const start = () =>
    orchard.client.startTeam({
      teamId,
      repo: makeRepo(),
      goal: options.goal ?? 'Build an evaluator',
      members: [
        { memberId: 'implementer', role: 'Implementer' },
        { memberId: 'reviewer', role: 'Reviewer' },
      ],
      handoff: options.handoff,
    });
  return { orchard, stub, teamId, start };
}

/** Waits until a Member's writer (writerTeamModel) has written a few lines into `<log>` in its worktree; its path. */
export function writerLog(orchard: TestOrchard, teamId: string, memberId = 'implementer', log = 'old.log', timeoutMs = TEAM_WAIT_MS): Promise<string> {
  return waitFor(
    async () => {
      const s = await orchard.client.status(memberSessionId(teamId, memberId)).catch(() => undefined);
      const path = s?.worktree ? join(s.worktree, log) : undefined;
      return path && existsSync(path) && readFileSync(path, 'utf8').split('\n').length > 3 ? path : undefined;
    },
    timeoutMs,
    `the ${memberId}'s writer running`,
  );
}
