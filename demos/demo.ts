/**
 * `npm start`: boots the embedded stack and a worker, creates a small fixture repository, and runs the
 * scripted demos: one session, two tasks, the second using the history of the first; then `route-first`, an
 * orchestrator routing 8 messages into the 3 children that own their topics; then `team`, a Coordinator and its
 * four members building a tested poker hand evaluator to a certified delivery, one task reassigned while its
 * execution writes; then `team-all-cancelled`, every task cancelled by the user and the run not delivered. Exits 0
 * when both tasks completed in that one session and the route-first, team and team-all-cancelled checks passed;
 * `--keep` leaves the stack and worker up afterwards.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { orchestratorWorkflowId, sessionWorkflowId, teamWorkflowId, type SessionStatusView } from '../contract/messages';
import { PROJECT_ROOT, startOrchard } from '../worker/runtime';
import { removeStackFile, writeStackFile } from '../worker/stack';
import { progress, type Progress } from '../worker/progress';
import { makeFixtureRepo } from './fixture';
import { formatRouteFirst, runRouteFirst } from './route-first';
import { formatTeamAllCancelled, runTeamAllCancelledDemo } from './team-all-cancelled';
import { formatTeamDemo, runTeamDemo } from './team-demo';

const keep = process.argv.includes('--keep');

function workflowUrl(webUiUrl: string | undefined, namespace: string, workflowId: string): string {
  if (!webUiUrl) return '(no Web UI: the Temporal cluster is external; open your own UI)';
  return `${webUiUrl}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}

function describeTurn(view: SessionStatusView): string {
  const t = view.lastTurn;
  return t ? `turn ${t.turn} ${t.outcome}: ${t.steps} model call(s), ${t.toolCalls} tool call(s) — ${t.finalExcerpt ?? ''}` : 'no turn yet';
}

/** Each step with a spinner on a terminal (plain lines elsewhere); a printed result ends the spinner first. */
let log: Progress;

function printResult(text: string): void {
  log.end();
  console.log(text);
}

async function main(): Promise<void> {
  log = await progress('[demo]', { stream: process.stdout });
  const orchard = await startOrchard(log);
  let ok = false;
  try {
    const { client, stack } = orchard;
    const repo = makeFixtureRepo(resolve(orchard.config.stateDir, 'demo'));
    log(`fixture repository: ${repo}`);
    const sessionId = `demo-${Date.now().toString(36)}`;
    const scenario = resolve(PROJECT_ROOT, 'scenarios/demo.json');
    await client.createSession({
      sessionId,
      title: 'Demo: notes and changelog',
      repo,
      model: { provider: 'scripted', scenario },
      task: 'Create NOTES.md that explains how this session works, check it, and commit it.',
    });
    log(`created session ${sessionId} (workflow ${sessionWorkflowId(sessionId)})`);
    log(`Web UI: ${workflowUrl(stack.webUiUrl, stack.namespace, sessionWorkflowId(sessionId))}`);

    const first = await client.waitUntilSettled(sessionId, { afterTurn: 1 });
    log(`task 1: ${describeTurn(first)}`);
    if (first.lastTurn?.outcome !== 'finished') throw new Error(`task 1 did not finish: ${JSON.stringify(first.lastTurn ?? first.error)}`);

    const sent = await client.send(sessionId, 'Add a CHANGELOG.md entry for the notes you wrote, and commit it.');
    log(`task 2 sent to the same session (${sent.taskId})`);
    const second = await client.waitUntilSettled(sessionId, { afterTurn: 2 });
    log(`task 2: ${describeTurn(second)}`);
    if (second.lastTurn?.outcome !== 'finished') throw new Error(`task 2 did not finish: ${JSON.stringify(second.lastTurn ?? second.error)}`);

    const commits = execFileSync('git', ['log', '--format=%h %s', `orchard/${sessionId}/work`], { cwd: repo })
      .toString()
      .trim();
    log(`branch orchard/${sessionId}/work in worktree ${second.worktree}:\n${commits.replace(/^/gm, '         ')}`);
    const files = ['NOTES.md', 'CHANGELOG.md'].filter((f) => existsSync(join(second.worktree!, f)));
    if (files.length !== 2) throw new Error(`expected NOTES.md and CHANGELOG.md in the worktree, found ${files.join(', ')}`);
    const mainHead = execFileSync('git', ['log', '-1', '--format=%s', 'main'], { cwd: repo }).toString().trim();
    log(`main checkout untouched (main is still at "${mainHead}")`);
    log(`both tasks completed in one session: ${sessionId} (${second.turnsCompleted} turns, status ${second.status})`);

    log('route-first: an orchestrator routes 8 messages about 3 topics into the children that own them');
    const routed = await runRouteFirst(client, {
      orchestratorId: `route-first-${Date.now().toString(36)}`,
      repo,
      scenario: resolve(PROJECT_ROOT, 'scenarios/route-first.json'),
      log,
    });
    printResult(formatRouteFirst(routed));
    log(`Web UI: ${workflowUrl(stack.webUiUrl, stack.namespace, orchestratorWorkflowId(routed.orchestratorId))}`);
    if (routed.problems.length > 0) throw new Error(`route-first failed its check: ${routed.problems.join('; ')}`);

    log(
      'team: a Coordinator plans a poker hand evaluator; the Planner plans it, the Implementer writes it, the Tester starts testing it and the user reassigns the tests to the Reviewer while the Tester still writes; delivered with a certificate',
    );
    const team = await runTeamDemo(client, orchard.pool, {
      teamId: `team-${Date.now().toString(36)}`,
      repo: makeFixtureRepo(resolve(orchard.config.stateDir, 'demo')),
      scenario: resolve(PROJECT_ROOT, 'scenarios/team-handoff.json'),
      log,
    });
    printResult(formatTeamDemo(team));
    log(`Web UI: ${workflowUrl(stack.webUiUrl, stack.namespace, teamWorkflowId(team.teamId))}`);
    if (team.problems.length > 0) throw new Error(`team failed its check: ${team.problems.join('; ')}`);

    log("team-all-cancelled: the user cancels every task (the Planner's while it writes); org_run_complete is refused; not delivered, and why");
    const cancelled = await runTeamAllCancelledDemo(client, orchard.pool, {
      teamId: `team-${Date.now().toString(36)}`,
      repo: makeFixtureRepo(resolve(orchard.config.stateDir, 'demo')),
      scenario: resolve(PROJECT_ROOT, 'scenarios/team-all-cancelled.json'),
      log,
    });
    printResult(formatTeamAllCancelled(cancelled));
    log(`Web UI: ${workflowUrl(stack.webUiUrl, stack.namespace, teamWorkflowId(cancelled.teamId))}`);
    if (cancelled.problems.length > 0) throw new Error(`team-all-cancelled failed its check: ${cancelled.problems.join('; ')}`);
    ok = true;

    if (keep) {
      writeStackFile(PROJECT_ROOT, stack);
      printResult(
        `[demo] --keep: stack and worker stay up (other shells reach it through .orchard/stack.json). Web UI: ${stack.webUiUrl ?? '(external)'}; Ctrl-C stops.`,
      );
      await new Promise<void>((done) => {
        process.once('SIGINT', done);
        process.once('SIGTERM', done);
      });
    }
  } finally {
    if (keep) removeStackFile(PROJECT_ROOT);
    log('stopping…');
    await orchard.stop();
  }
  log.end(ok);
  process.exit(ok ? 0 : 1);
}

main().catch((err) => {
  log?.end(false);
  console.error(`[demo] failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});
