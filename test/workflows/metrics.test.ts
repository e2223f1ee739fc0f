import test from 'ava';
import { memberSessionId } from '../../contract/member-session';
import { startMetricsServer } from '../../worker/metrics-server';
import { startScriptedTeam, type Call } from '../helpers/team';
import { git, testConfinement, uniqueId, writeScenario } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * Issue 21, deliverable 7: metrics without content. Real work against a real worker — an isolated session whose
 * bash call the guard refuses, an orchestrator routing a message to a child whose result comes back as a manifest, a team run with a reassign (its handoff missing a
 * 1 s SLO, then released) and a certified delivery — then `GET /metrics` over HTTP from the server the worker
 * starts. The counters moved, and no label value (nor anything else in the scrape) carries a prompt, a task, a
 * command, a path or an id of the run.
 */

/** Every label of Orchard's metrics, with the values it may take (docs/operations.md, "Metrics"). */
const LABEL_VALUES: Record<string, RegExp> = {
  role: /^(session|orchestrator|coordinator)$/,
  reason: /^[a-z_]+$/,
  result: /^(new_facts|no_new_work_facts|issued|already_issued|refused)$/,
  outcome: /^(finished|waiting_for_org_event|released|timeout|unknown|failed)$/,
  kind: /^(coordinator|orchestrator)$/,
  type: /^(prompt|completion)$/,
  origin: /^(host_heartbeat|lease_renewal|activity|worker)$/,
  activity: /^(none|[a-z][a-zA-Z]+)$/,
  le: /^(\+Inf|\d+(\.\d+)?)$/,
};

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parse(text: string): Sample[] {
  return text
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!m) throw new Error(`not a sample line: ${line}`);
      const labels: Record<string, string> = {};
      for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
      return { name: m[1], labels, value: Number(m[3]) };
    });
}

const total = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0);

const COMPLETE: Call = ['org_run_complete', { summary: 'the metrics run is done' }];
const REFUSED_COMMAND = 'git update-ref refs/heads/main HEAD';

test('after a refused tool call, an orchestrator message and a certified team run with a handoff, /metrics has counted each, and no label carries content', async (t) => {
  const h = await startScriptedTeam(t, {
    plan: [
      ['task_create', { taskId: 'measured', title: 'Write the measured log', description: 'writes until stopped', owner: 'implementer' }],
      ['plan_approve', {}],
    ],
    work: { measured: 'write' },
    // The old runtime is held past a 1 s SLO (a miss is recorded), then released.
    handoff: { sloMs: 1000, timeoutMs: 120_000 },
  });
  const { orchard } = h;
  const server = await startMetricsServer({ port: 0, host: '127.0.0.1' });
  t.teardown(() => server.close());

  // A session whose command the guard refuses (an isolated child may not move main).
  const sessionId = uniqueId('metered');
  const sessionTask = 'Move main to my commit, please';
  const scenario = writeScenario({
    name: 'refused',
    turns: [{ steps: [{ tool_calls: [{ name: 'bash', arguments: { command: REFUSED_COMMAND } }] }, { content: 'refused, as expected' }] }],
  });
  await orchard.client.createSession({
    sessionId,
    title: 'metered',
    repo: h.repo,
    isolated: true,
    model: { provider: 'scripted', scenario },
    task: sessionTask,
  });
  const session = await orchard.client.waitUntilSettled(sessionId, { afterTurn: 1 });
  t.is(session.lastTurn?.outcome, 'finished');
  const { rows } = await orchard.pool.query(`SELECT content FROM transcript_entries WHERE session_id = $1 AND role = 'tool'`, [sessionId]);
  t.regex(String(rows[0]?.content), /\(moves_other_ref\)/);

  // Where commands run in the sandbox: a command that points the child's HEAD at main is put back and holds the worktree.
  const sandboxed = (await testConfinement()).mode === 'sandbox';
  const heldId = uniqueId('metered-held');
  if (sandboxed) {
    const held = writeScenario({
      name: 'held',
      turns: [
        {
          steps: [
            {
              tool_calls: [
                { name: 'write_file', arguments: { path: 'hack.sh', content: 'git symbolic-ref HEAD refs/heads/main\n' } },
                { name: 'bash', arguments: { command: `git checkout -q orchard/${heldId}/work && bash hack.sh` } },
              ],
            },
            { content: 'held' },
          ],
        },
      ],
    });
    await orchard.client.createSession({
      sessionId: heldId,
      title: 'held',
      repo: h.repo,
      isolated: true,
      model: { provider: 'scripted', scenario: held },
      task: 'hold',
    });
    t.true((await orchard.client.waitUntilSettled(heldId, { afterTurn: 1 })).held);
  } else t.log('no sandbox on this machine: no verification hold to count');

  // An orchestrator (the scripted router) creates a child for the message; the child's result comes back as a manifest.
  const orchestratorId = uniqueId('metered-orch');
  const orchestratorMessage = 'What is the state of the login page work?';
  const router = writeScenario({
    name: 'router',
    router: { topics: [{ title: 'login page', topic: 'login-page', keywords: ['login'] }] },
    turns: [{ steps: [{ content: 'child finished' }] }],
  });
  const routed = { provider: 'scripted' as const, scenario: router };
  await orchard.client.startOrchestrator({ orchestratorId, repo: h.repo, model: routed, childModel: routed });
  await orchard.client.message(orchestratorId, { text: orchestratorMessage });
  const orchestrated = await waitFor(
    async () => {
      const v = await orchard.client.orchestratorStatus(orchestratorId);
      return v.turnsCompleted >= 2 && v.children.length === 1 ? v : undefined;
    },
    60_000,
    'the message turn and the manifest turn',
  );
  const childId = orchestrated.children[0].childId;

  // The team: the implementer writes, the task is reassigned, the replacement completes, the Coordinator reads the
  // board twice (the second read is refused: nothing changed) and requests completion.
  const oldLog = await h.writing('measured', 'implementer');
  const reassignReason = 'the reviewer owns the measured log now';
  const stuck = await h.stick('implementer');
  await orchard.client.reassignTask(h.teamId, { taskId: 'measured', newOwner: 'reviewer', reason: reassignReason });
  await h.until('the SLO missed', (v) => v.receipts[0]?.sloMissed === true);
  await stuck.unstick();
  await h.until('the replacement completed', (v) => v.executions.some((e) => e.taskId === 'measured-r1' && e.state === 'completed'));
  const reads = await h.script([
    ['task_list', {}],
    ['task_list', {}],
  ]);
  t.regex(reads[1], /^error \(coordinator_no_new_work_facts\)/);
  const [delivered] = await h.script([COMPLETE]);
  t.regex(delivered, /^delivered: certificate /);
  const view = await h.status();
  t.like(view.receipts[0], { state: 'released', sloMissed: true });

  const response = await fetch(`http://127.0.0.1:${server.port}/metrics`);
  t.is(response.status, 200);
  t.regex(response.headers.get('content-type') ?? '', /^text\/plain/);
  const text = await response.text();
  const samples = parse(text);

  // The counters moved.
  t.true(total(samples, 'orchard_tool_refusals_total', { role: 'session', reason: 'moves_other_ref' }) >= 1, 'the guard refusal');
  t.true(total(samples, 'orchard_tool_refusals_total', { role: 'coordinator', reason: 'coordinator_no_new_work_facts' }) >= 1, 'the re-read refusal');
  t.true(total(samples, 'orchard_coordinator_observations_total', { result: 'new_facts' }) >= 1);
  t.true(total(samples, 'orchard_coordinator_observations_total', { result: 'no_new_work_facts' }) >= 1);
  t.true(total(samples, 'orchard_coordinator_turn_ends_total', { outcome: 'finished' }) >= 1, 'a turn that committed facts');
  t.true(total(samples, 'orchard_coordinator_turn_ends_total', { outcome: 'waiting_for_org_event' }) >= 1, 'a turn without progress');
  t.true(total(samples, 'orchard_wake_coalesced_events_count', { kind: 'coordinator' }) >= 1, 'a Coordinator wake on work facts');
  t.true(total(samples, 'orchard_wake_coalesced_events_sum', { kind: 'coordinator' }) >= 1);
  t.true(total(samples, 'orchard_wake_coalesced_events_count', { kind: 'orchestrator' }) >= 1, "an orchestrator manifest of its child's result");
  t.true(total(samples, 'orchard_handoff_outcomes_total', { outcome: 'released' }) >= 1);
  t.true(total(samples, 'orchard_handoff_duration_seconds_count', { outcome: 'released' }) >= 1);
  t.true(total(samples, 'orchard_handoff_duration_seconds_sum', { outcome: 'released' }) > 0);
  t.true(total(samples, 'orchard_handoff_slo_misses_total') >= 1);
  if (sandboxed) t.true(total(samples, 'orchard_sandbox_verification_holds_total') >= 1);
  t.true(total(samples, 'orchard_certificate_validations_total', { result: 'issued' }) >= 1);
  for (const role of ['session', 'orchestrator', 'coordinator'])
    for (const type of ['prompt', 'completion']) t.true(total(samples, 'orchard_model_tokens_total', { type, role }) > 0, `${type} tokens of ${role}`);

  // No content: every metric is Orchard's, every label is a documented one with a value from its closed set …
  for (const sample of samples) {
    t.regex(sample.name, /^orchard_[a-z_]+$/);
    for (const [label, value] of Object.entries(sample.labels)) {
      const allowed = LABEL_VALUES[label];
      if (!allowed) t.fail(`${sample.name}: undocumented label ${label}="${value}"`);
      else t.regex(value, allowed, `${sample.name}{${label}}`);
    }
  }
  // … and nothing of the run appears anywhere in the scrape: ids, paths, prompts, tasks, commands.
  const worktree = session.worktree!;
  const content = [
    sessionId,
    heldId,
    'hack.sh',
    orchestratorId,
    childId,
    'login page',
    h.teamId,
    memberSessionId(h.teamId, 'implementer'),
    'measured',
    h.repo,
    worktree,
    oldLog,
    git(h.repo, 'rev-parse', 'HEAD'),
    sessionTask,
    orchestratorMessage,
    reassignReason,
    REFUSED_COMMAND,
    'update-ref',
    'stub',
    view.certificate!.certificateId,
  ];
  for (const piece of content) t.false(text.includes(piece), `the scrape contains ${JSON.stringify(piece)}`);
});
