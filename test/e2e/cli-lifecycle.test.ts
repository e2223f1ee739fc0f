import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { runOrchard, workerEnv } from '../helpers/cli-process';
import { makeRepo, sharedOrchard, uniqueId, writeScenario } from '../helpers/orchard';
import { gitIn } from '../helpers/git';
import { waitFor } from '../helpers/wait';
import { orchestratorWorkflowId, sessionWorkflowId, teamWorkflowId } from '../../contract/messages';

const shared = sharedOrchard(test);
const DEMO = join(__dirname, '../../scenarios/demo.json');
const ROUTE_FIRST = join(__dirname, '../../scenarios/route-first.json');
const TEAM_HANDOFF = join(__dirname, '../../scenarios/team-handoff.json');

/** Runs the real CLI against the test run's dev server, database and this file's worker. */
const orchard = (args: string[]) => runOrchard(args, workerEnv(shared()));

const executionOf = async (workflowId: string) => (await shared().client.temporal.workflow.getHandle(workflowId).describe()).status.name;

test('session watch follows a turn to its end, session log is the stored transcript, session diff is the branch against its base', async (t) => {
  t.timeout(180_000);
  const id = uniqueId('inspect');
  const repo = makeRepo();
  const baseAtCreate = gitIn(repo, 'rev-parse', 'HEAD').trim();
  const created = await orchard(['session', 'create', '--id', id, '--title', 'inspect', '--repo', repo, '--scenario', DEMO, '--task', 'Create NOTES.md']);
  t.is(created.code, 0, created.stderr);

  // watch: one JSON object per line, entries as they are recorded, and the turn's end; exit 0 for a finished turn.
  const watched = await orchard(['session', 'watch', id, '--json', '--interval', '100']);
  t.is(watched.code, 0, watched.stderr);
  const events = watched.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { status?: { status: string }; entry?: { role: string; toolCalls?: { name: string }[] }; lastTurn?: { outcome: string } });
  t.like(events.at(-1), { lastTurn: { outcome: 'finished' } });
  const watchedCalls = events.flatMap((e) => e.entry?.toolCalls?.map((c) => c.name) ?? []);
  // Whatever part of the turn the watch saw, the calls it printed are the turn's calls, in order, each once.
  t.deepEqual(watchedCalls, ['write_file', 'bash', 'git_commit'].slice(3 - watchedCalls.length));

  // log: exactly the rows the store holds for the session's execution chain, in order, tool calls and results included.
  const logged = await orchard(['session', 'log', id, '--json']);
  t.is(logged.code, 0, logged.stderr);
  const entries = JSON.parse(logged.stdout) as { role: string; content: string | null; toolCalls?: { name: string }[]; seq: number }[];
  const { rows } = await shared().pool.query<{ seq: string; role: string }>(
    `SELECT seq, role FROM transcript_entries WHERE session_id = $1 ORDER BY turn, step, ordinal`,
    [id],
  );
  t.deepEqual(
    entries.map((e) => [e.seq, e.role]),
    rows.map((r) => [Number(r.seq), r.role]),
  );
  t.is(entries[0].content, 'Create NOTES.md');
  t.deepEqual(
    entries.flatMap((e) => e.toolCalls?.map((c) => c.name) ?? []),
    ['write_file', 'bash', 'git_commit'],
  );
  const text = await orchard(['session', 'log', id]);
  t.is(text.code, 0, text.stderr);
  t.regex(text.stdout, /── turn 1 \(task t1\) ──\nuser: Create NOTES\.md\n/);

  // diff: the committed NOTES.md against the commit the branch started from; then what the worktree holds uncommitted.
  const diffed = await orchard(['session', 'diff', id, '--json']);
  t.is(diffed.code, 0, diffed.stderr);
  const diff = JSON.parse(diffed.stdout) as { base: string; head: string; committed: string; uncommitted: string; untracked: string[]; branch: string };
  t.is(diff.base, baseAtCreate);
  t.is(diff.head, gitIn(repo, 'rev-parse', `refs/heads/${diff.branch}`).trim());
  t.regex(diff.committed, /^\+\+\+ b\/NOTES\.md$/m);
  t.is(diff.uncommitted, '');
  t.deepEqual(diff.untracked, []);
  const view = await shared().client.status(id);
  writeFileSync(join(view.worktree!, 'NOTES.md'), 'changed\n');
  writeFileSync(join(view.worktree!, 'scratch.txt'), 'new\n');
  const after = JSON.parse((await orchard(['session', 'diff', id, '--json'])).stdout) as typeof diff;
  t.regex(after.uncommitted, /^\+changed$/m);
  t.deepEqual(after.untracked, ['scratch.txt']);
  t.is(after.committed, diff.committed);

  // A watch that runs out of time says so (and leaves the session alone).
  const slow = uniqueId('slow');
  const sleeper = writeScenario({
    name: 'sleeper',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'sleep 5' } }] }, { content: 'slept' }] }],
  });
  t.is((await orchard(['session', 'create', '--id', slow, '--title', 'slow', '--repo', repo, '--scenario', sleeper, '--task', 'sleep'])).code, 0);
  const impatient = await orchard(['session', 'watch', slow, '--timeout', '1']);
  t.is(impatient.code, 2, impatient.stdout);
  t.regex(impatient.stderr, /^orchard: wait_timeout: session .* is still progressing after 1 s/);
  t.like(await shared().client.waitUntilSettled(slow, { timeoutMs: 60_000 }), { lastTurn: { outcome: 'finished' } });

  // status names the model that answered the session's last call (from the store).
  const status = JSON.parse((await orchard(['session', 'status', id, '--json'])).stdout) as { model?: string };
  t.is(status.model, 'scripted-demo (scripted)');

  const missing = await orchard(['session', 'log', uniqueId('nobody')]);
  t.is(missing.code, 2);
  t.regex(missing.stderr, /^orchard: session_not_found: /);
});

test('orchestrator list and cancel: the orchestrator is cancelled and its children closed; a repeat changes nothing', async (t) => {
  t.timeout(180_000);
  const id = uniqueId('orch-cancel');
  t.is((await orchard(['orchestrator', 'start', id, '--repo', makeRepo(), '--scripted', ROUTE_FIRST])).code, 0);
  const sent = await orchard(['orchestrator', 'send', id, 'The login page test is flaky on CI', '--wait', '--json']);
  t.is(sent.code, 0, sent.stderr);
  const childId: string = JSON.parse(sent.stdout).deliveries[0].childId;

  const listed = await waitFor(
    async () => {
      const run = await orchard(['orchestrator', 'list', '--json']);
      const rows = JSON.parse(run.stdout) as { id: string; execution: string }[];
      return rows.find((r) => r.id === id);
    },
    30_000,
    'the orchestrator in the list',
  );
  t.is(listed.execution, 'RUNNING');

  const cancelled = await orchard(['orchestrator', 'cancel', id, '--reason', 'done for today', '--json']);
  t.is(cancelled.code, 0, cancelled.stderr);
  t.like(JSON.parse(cancelled.stdout), { id, kind: 'orchestrator', execution: 'CANCELLED', alreadyClosed: false, sessionsClosed: [childId] });
  t.is(await executionOf(orchestratorWorkflowId(id)), 'CANCELLED');
  t.not(await executionOf(sessionWorkflowId(childId)), 'RUNNING');
  const child = await shared().client.status(childId);
  t.is(child.status, 'closed');

  const again = await orchard(['orchestrator', 'cancel', id, '--json']);
  t.is(again.code, 0, again.stderr);
  t.like(JSON.parse(again.stdout), { alreadyClosed: true, sessionsClosed: [] });

  const unknown = await orchard(['orchestrator', 'cancel', uniqueId('nobody')]);
  t.is(unknown.code, 2);
  t.regex(unknown.stderr, /^orchard: orchestrator_not_found: /);
});

test("team list and cancel: the run is cancelled and its Members' sessions closed", async (t) => {
  t.timeout(240_000);
  const id = uniqueId('team-cancel');
  const started = await orchard(['team', 'start', id, '--repo', makeRepo(), '--goal', 'Build a poker hand evaluator', '--scripted', TEAM_HANDOFF]);
  t.is(started.code, 0, started.stderr);
  const parent = teamWorkflowId(id);
  const members = await waitFor(
    async () => {
      const open: string[] = [];
      for await (const wf of shared().client.temporal.workflow.list({
        query: `OrchardParent = '${parent}' AND OrchardKind = 'session' AND ExecutionStatus = 'Running'`,
      })) {
        open.push(wf.workflowId);
      }
      return open.length > 0 ? open : undefined;
    },
    90_000,
    "a Member's session",
  );
  const listed = JSON.parse((await orchard(['team', 'list', '--json'])).stdout) as { id: string; status: string }[];
  t.truthy(listed.find((r) => r.id === id));

  // Reassigning running work to a member the team does not have, or to the member who has it, is refused (the
  // Tester's task runs a sweep of about 30 s: long enough to be running still).
  const running = await waitFor(
    async () => (await shared().client.teamStatus(id)).executions.find((e) => e.taskId === 'test-evaluator' && e.state === 'running'),
    120_000,
    "the Tester's running execution",
  );
  const nobody = await orchard(['team', 'reassign', id, running.taskId, '--to', 'nobody', '--reason', 'test']);
  t.is(nobody.code, 2, nobody.stdout);
  t.regex(nobody.stderr, /^orchard: member_not_found: no member nobody/);
  const same = await orchard(['team', 'reassign', id, running.taskId, '--to', running.memberId, '--reason', 'test']);
  t.is(same.code, 2, same.stdout);
  t.regex(same.stderr, /^orchard: same_owner: /);

  const cancelled = await orchard(['team', 'cancel', id, '--json']);
  t.is(cancelled.code, 0, cancelled.stderr);
  const result = JSON.parse(cancelled.stdout) as { execution: string; sessionsClosed: string[] };
  t.is(result.execution, 'CANCELLED');
  t.is(await executionOf(parent), 'CANCELLED');
  for (const workflowId of members) t.not(await executionOf(workflowId), 'RUNNING', workflowId);
  t.true(result.sessionsClosed.length >= 1);
});
