import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import type { RunCompletionCertificate } from '../../activities/store/team';
import { OrchardClient } from '../../client/client';
import { hostTaskQueue, teamWorkflowId, type TeamStatusView } from '../../contract/messages';
import { memberSessionId } from '../../contract/member-session';
import { sessionBranch } from '../../contract/ids';
import { createOrchardWorkers } from '../../worker/worker';
import { calls, final } from '../helpers/fleet-model';
import { completion, stubModel } from '../helpers/model-stub';
import { git, testConfinement, testPool, testStackEnv, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';
import { startSharedWorker } from './harness';

/**
 * Multi-host correctness (issue 18, deliverable 5): a team's repository lives on one host's disk, and every activity
 * that reads or writes it runs on that host's queue (patch `team-git-on-host`). Two workers with different host ids:
 *
 * - host H, in this process, host-only (`orchard-host-H`): it sees the repository and runs the Members' worktrees
 *   and bash — and, with the patch, settling an execution (the Member's head) and the Coordinator's tools
 *   (certification builds the result branch);
 * - host H2, in a process of its own under bubblewrap with H's directory (repository and worktrees) covered by an
 *   empty tmpfs: the ONLY worker on the shared queue (workflows, model calls, store, dispatch). It cannot see the
 *   repository at all.
 *
 * Members really commit; the Coordinator asks for completion when the board is ready. The certificate must carry the
 * Members' real commits (the heads of their branches, read with git here) and a result that contains them — never
 * an output with no commit and a result equal to the base, which is what a repository read on the wrong disk gave.
 *
 * Waits: ORCHARD_TEST_MULTI_HOST_WAIT_MS (default 240 s) per state; a passing wait ends at once.
 */
const WAIT_MS = Number(process.env.ORCHARD_TEST_MULTI_HOST_WAIT_MS ?? 240_000);

const isCoordinator = (body: any) => (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
const agentOf = (body: any) => /^You are (\S+),/.exec(String(body.messages[0].content))?.[1];
const lastUser = (body: any) => String(body.messages.filter((m: any) => m.role === 'user').at(-1)?.content ?? '');
/** Tool results since the last user message (the step within a turn). */
const stepOf = (body: any) => {
  const messages: any[] = body.messages;
  return messages.slice(messages.map((m) => m.role).lastIndexOf('user') + 1).filter((m) => m.role === 'tool').length;
};

/** Each Member commits a file of its own on its branch with bash, then answers done. */
const WORK: Record<string, { taskId: string; file: string }> = {
  implementer: { taskId: 'impl', file: 'impl.txt' },
  tester: { taskId: 'tests', file: 'tests.txt' },
};

/** bubblewrap can hide a directory from a process here (mount namespaces work): probed once, by effect. */
function bwrapHides(): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-mh-probe-'));
  writeFileSync(join(dir, 'seen'), 'x');
  const r = spawnSync('bwrap', ['--dev-bind', '/', '/', '--tmpfs', dir, '--', 'test', '-e', join(dir, 'seen')]);
  rmSync(dir, { recursive: true, force: true });
  return r.error === undefined && r.status === 1;
}

const maybe = bwrapHides() ? test : test.skip;

maybe(
  "two hosts, only the team host sees the repository: settlement and certification run there, and the certificate carries the Members' real commits",
  async (t) => {
    t.timeout(3 * WAIT_MS + 120_000);
    const env = testStackEnv();
    const suffix = uniqueId('mh').slice(3);
    const taskQueue = `test-mh-${suffix}`;
    const hostH = `host-mh-${suffix}`;
    const hostH2 = `${hostH}-blind`;

    // Host H's disk: a dedicated parent holding the repository and H's worktrees, so hiding it hides nothing else.
    const disk = mkdtempSync(join(tmpdir(), 'orchard-mh-disk-'));
    const blindRoot = mkdtempSync(join(tmpdir(), 'orchard-mh-blind-'));
    // Registered first, so it runs last: after both workers have stopped.
    t.teardown(() => {
      for (const dir of [disk, blindRoot]) rmSync(dir, { recursive: true, force: true });
    });
    const repo = join(disk, 'repo');
    mkdirSync(repo);
    git(repo, 'init', '-q', '-b', 'main');
    writeFileSync(join(repo, 'README.md'), '# multi-host fixture\n');
    git(repo, 'add', '-A');
    git(repo, 'commit', '-q', '-m', 'initial');
    const base = git(repo, 'rev-parse', 'main');

    const teamId = uniqueId('team-mh');
    const stub = await stubModel(t, (body) => {
      const step = stepOf(body);
      if (!isCoordinator(body)) {
        const work = WORK[agentOf(body) ?? ''];
        if (!work) return completion({ content: 'nothing to do' });
        if (step === 0) return calls(['bash', { command: `echo ${work.taskId} > ${work.file} && git add ${work.file} && git commit -qm ${work.taskId}` }]);
        return completion({ content: `committed ${work.file}` });
      }
      const text = lastUser(body);
      if (step > 0) return final('Done.');
      if (text.startsWith('Plan:')) {
        return calls(
          ...Object.entries(WORK).map(([owner, w]): [string, unknown] => [
            'task_create',
            { taskId: w.taskId, title: w.taskId, description: `Commit ${w.file}.`, owner },
          ]),
          ['plan_approve', {}],
        );
      }
      if (text.includes('completion_candidate.state is ready')) return calls(['org_run_complete', { summary: 'Both files are committed.' }]);
      return final('Noted.');
    });

    // The shared queue's only worker: host H2, blind to H's disk.
    const pool = await testPool(t); // migrates the database before any worker starts
    const blind = await startSharedWorker(t, {
      taskQueue,
      hostId: hostH2,
      worktreeRoot: blindRoot,
      modelUrl: stub.url,
      hide: [disk],
      env: { ORCHARD_TEST_PROBE_PATH: repo },
    });
    t.regex(blind.output(), new RegExp(`^probe ${repo} visible=false$`, 'm'), 'the shared-queue worker cannot see the repository');

    // Host H, host-only, in this process: the repository's disk.
    const connection = await NativeConnection.connect({ address: env.temporalAddress });
    const clientConnection = await Connection.connect({ address: env.temporalAddress });
    const temporal = new Client({ connection: clientConnection, namespace: env.namespace });
    const host = await createOrchardWorkers({
      connection,
      namespace: env.namespace,
      taskQueue,
      hostId: hostH,
      worktreeRoot: join(disk, 'worktrees'),
      pool,
      client: temporal,
      hostOnly: true,
      confinement: await testConfinement(),
      shutdownGraceMs: 10_000,
    });
    const running = host.run();
    t.teardown(async () => {
      host.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      await clientConnection.close();
    });

    const client = new OrchardClient(temporal, { taskQueue, defaultHost: hostH });
    const members = Object.keys(WORK);
    await client.startTeam({
      teamId,
      repo,
      host: hostH,
      goal: 'Plan: commit impl.txt and tests.txt',
      members: members.map((memberId) => ({ memberId, role: memberId[0].toUpperCase() + memberId.slice(1) })),
    });

    const status = () => client.teamStatus(teamId);
    const until = async (what: string, probe: (v: TeamStatusView) => boolean) => {
      try {
        return await waitFor(
          async () => {
            const v = await status();
            return probe(v) ? v : undefined;
          },
          WAIT_MS,
          what,
        );
      } catch (err) {
        // Say where the team stood: its status, and what its workflows' activities are stuck on (e.g. a settle that
        // keeps failing), for whoever reads the failure.
        const v = await status().catch(() => undefined);
        const stuck: string[] = [];
        for (const id of [teamWorkflowId(teamId), ...(v?.executions ?? []).map((e) => e.workflowId!).filter(Boolean)]) {
          const pending =
            (
              await temporal.workflow
                .getHandle(id)
                .describe()
                .catch(() => undefined)
            )?.raw.pendingActivities ?? [];
          for (const p of pending) stuck.push(`${id}: ${p.activityType?.name} attempt ${p.attempt}: ${p.lastFailure?.message ?? 'no failure yet'}`);
        }
        throw new Error(`${(err as Error).message}; pending activities: ${JSON.stringify(stuck)}; status: ${JSON.stringify(v)}`);
      }
    };

    const view = await until('delivered', (v) => v.status === 'delivered');
    t.is(view.status, 'delivered');

    // The Members' real commits: the heads of their branches, read with git in the repository on H's disk.
    const heads = new Map(members.map((memberId) => [WORK[memberId].taskId, git(repo, 'rev-parse', sessionBranch(memberSessionId(teamId, memberId)))]));
    for (const [taskId, head] of heads) {
      t.not(head, base, `${taskId}'s member committed on its branch`);
      const file = Object.values(WORK).find((w) => w.taskId === taskId)!.file;
      t.is(git(repo, 'show', `${head}:${file}`), taskId, `${taskId}'s commit holds its file`);
    }

    // Every output carries its Member's commit (none with no commit).
    const outputs = (await pool.query(`SELECT task_id, commit_sha FROM team_task_outputs WHERE team_id = $1 ORDER BY task_id`, [teamId])).rows;
    t.deepEqual(
      outputs.map((o) => [o.task_id, o.commit_sha]),
      [...heads].sort(([a], [b]) => a.localeCompare(b)),
      'each output is bound to its member branch head',
    );

    // The certificate: delivered, one, its result built from those commits.
    const certs: RunCompletionCertificate[] = (await pool.query(`SELECT certificate FROM team_certificates WHERE team_id = $1`, [teamId])).rows.map(
      (r) => r.certificate,
    );
    t.is(certs.length, 1, 'exactly one certificate');
    const [cert] = certs;
    t.is(cert.outcome, 'delivered');
    const result = cert.result!;
    t.truthy(result, 'the certificate names a result');
    t.is(result.base, base);
    t.not(result.head, base, 'the result is not the base: it carries the work');
    t.deepEqual(
      result.commits.map((c) => [c.taskId, c.commitSha]).sort(([a], [b]) => String(a).localeCompare(String(b))),
      [...heads].sort(([a], [b]) => a.localeCompare(b)),
      "the certificate's outputs carry the Members' real commits",
    );
    t.false(
      result.commits.some((c) => c.commitSha === null || c.how === 'no_commit'),
      'no output without a commit',
    );
    t.is(git(repo, 'rev-parse', result.branch), result.head, 'the result branch exists on H at the certified head');
    for (const [taskId, head] of heads) {
      const contained = spawnSync('git', ['merge-base', '--is-ancestor', head, result.head], { cwd: repo });
      t.is(contained.status, 0, `${taskId}'s commit ${head} is in the result ${result.head}`);
    }
    t.deepEqual(git(repo, 'ls-tree', '-r', '--name-only', result.head).split('\n').sort(), ['README.md', 'impl.txt', 'tests.txt']);

    // Where the repository's activities ran: settling each execution and every Coordinator tool on H's queue, taken
    // by H's worker; the model calls on the shared queue, taken by the blind worker (the only one there).
    const placements = async (workflowId: string) => {
      const events = (await temporal.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
      const scheduled = new Map<string, { type: string; queue: string }>();
      const started: { type: string; queue: string; identity: string }[] = [];
      for (const e of events) {
        const s = e.activityTaskScheduledEventAttributes;
        if (s) scheduled.set(String(e.eventId), { type: s.activityType?.name ?? '', queue: s.taskQueue?.name ?? '' });
        const st = e.activityTaskStartedEventAttributes;
        if (st) started.push({ ...scheduled.get(String(st.scheduledEventId))!, identity: st.identity ?? '' });
      }
      return started;
    };
    const onH = { queue: hostTaskQueue(hostH), identity: `orchard-host@${hostH}` };
    const team = await placements(teamWorkflowId(teamId));
    const tools = team.filter((a) => a.type === 'coordinatorTool');
    t.true(tools.length >= 4, `coordinator tools ran (${tools.length})`);
    t.deepEqual([...new Set(tools.map((a) => JSON.stringify({ queue: a.queue, identity: a.identity })))], [JSON.stringify(onH)]);
    const models = team.filter((a) => a.type === 'modelStep');
    t.true(models.length > 0);
    t.true(
      models.every((a) => a.queue === taskQueue && a.identity === `orchard@${hostH2}`),
      JSON.stringify(models),
    );
    const executions = view.executions.filter((e) => e.state === 'completed');
    t.is(executions.length, members.length);
    for (const e of executions) {
      const settles = (await placements(e.workflowId!)).filter((a) => a.type === 'settleExecution');
      t.true(settles.length >= 1, `${e.taskId} was settled`);
      t.true(
        settles.every((a) => a.queue === onH.queue && a.identity === onH.identity),
        JSON.stringify(settles),
      );
    }
  },
);
