import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { CancelRunResult, OrchardClient, RunSummary } from '../client/client';
import { OrchardError } from '../client/errors';
import { sessionIdProblem, slugOf } from '../contract/ids';
import { describeCliError, type CliErrorContext } from './errors';
import { registerGuardCommand } from './guard-command';
import { registerExecCommand, registerSandboxCommand } from './exec-command';
import { registerBoardCommand } from './board-command';
import { registerCodecServerCommand } from './codec-server';
import { budgetLine } from './budget-line';
import type { OrchestratorStatusView, SessionStatusView } from '../contract/messages';
import type { TranscriptEntry } from '../activities/store/transcript';
import { PROJECT_ROOT, workerConfigFromEnv } from '../worker/config';
import type { TemporalTarget } from '../client/connection';

/**
 * `orchard` — run the stack and workers, and drive sessions from a shell. Client commands find Temporal
 * the way the Temporal CLI does (TEMPORAL_ADDRESS, temporal.toml), else through the `.orchard/stack.json` a
 * running `orchard dev` wrote.
 *
 * Start time: what this module imports at the top is what `orchard --help` loads, so it imports only commander and
 * modules that import no package (test/e2e/cli-start.test.ts holds it to that). The Temporal SDK, the database
 * driver and the guard's parser are imported inside the commands that use them.
 */
const program = new Command('orchard')
  .description('Durable orchestration for fleets of AI coding agents, on Temporal')
  .version(packageVersion(), '-V, --version', 'print the version')
  // One line that says what was wrong, and where the usage is (not the whole help text).
  .showHelpAfterError('(orchard <command> --help shows its usage)')
  // Set before any command is added, so every command inherits it: bad usage exits 2 like every other refusal.
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2));

/**
 * `send … --wait` when the turn that answered did not finish (failed, cancelled, stopped at its step limit, or never
 * ran): the status is printed as usual, and the exit code says it was not a success.
 */
const TURN_NOT_FINISHED_EXIT = 3;
/** `team verify` when the verify command no longer passes on the certified tree (the result is printed as usual). */
const VERIFY_FAILED_EXIT = 4;

/** What the running command talks to, for error messages that say what to check. */
let errorContext: CliErrorContext = {};

const log = (line: string) => console.log(`[orchard] ${line}`);

program
  .command('dev')
  .description('boot the embedded stack (Temporal dev server + PGlite unless configured) and a worker, in the foreground')
  .option('--metrics-port <port>', 'serve GET /metrics on this port (ORCHARD_METRICS_PORT; docs/operations.md, Metrics)')
  .action(async (options: { metricsPort?: string }) => {
    if (options.metricsPort !== undefined) process.env.ORCHARD_METRICS_PORT = options.metricsPort;
    const { startOrchard } = await import('../worker/runtime');
    const { readStackFile, writeStackFile, removeStackFile } = await import('../worker/stack');
    const running = readStackFile(PROJECT_ROOT);
    if (running) {
      throw new OrchardError(
        'dev_already_running',
        `orchard dev already runs on this state directory (pid ${running.pid}, Temporal at ${running.temporalAddress}` +
          `${running.webUiUrl ? `, Web UI ${running.webUiUrl}` : ''}): use it, stop it, or give this one another ORCHARD_STATE_DIR`,
      );
    }
    // The demo model when none is configured: `orchard dev` is the local playground. Booting shows its steps with a
    // spinner on a terminal; what the worker says later is plain lines.
    const { progress } = await import('../worker/progress');
    let booting: import('../worker/progress').Progress | undefined = await progress('[orchard]', { stream: process.stdout });
    const orchard = await startOrchard((line) => (booting ? booting(line) : log(line)), { model: { kind: 'demo' } }).catch((err: unknown) => {
      booting?.end(false);
      throw err;
    });
    booting.end();
    booting = undefined;
    writeStackFile(PROJECT_ROOT, orchard.stack);
    if (orchard.stack.webUiUrl) log(`Web UI: ${orchard.stack.webUiUrl}`);
    log(`Temporal ${orchard.stack.temporalAddress}, task queue ${orchard.config.taskQueue}, host ${orchard.config.hostId}. Ctrl-C stops.`);
    await runUntilStopped(orchard, () => removeStackFile(PROJECT_ROOT, { onlyIfOwnedBy: process.pid }));
  });

program
  .command('worker')
  .description('run a worker against an existing Temporal (TEMPORAL_ADDRESS / temporal.toml) and PostgreSQL (DATABASE_URL)')
  .option('--host-only', "poll only this host's worktree queue (no workflows, no model calls)")
  .option('--scripted <scenario>', 'answer model calls from this scripted scenario file instead of ORCHARD_MODEL_URL (demos, tests)')
  .option('--metrics-port <port>', 'serve GET /metrics on this port (ORCHARD_METRICS_PORT; docs/operations.md, Metrics)')
  .action(async (options: { hostOnly?: boolean; scripted?: string; metricsPort?: string }) => {
    if (options.metricsPort !== undefined) process.env.ORCHARD_METRICS_PORT = options.metricsPort;
    const { modelProviderFor, startOrchard } = await import('../worker/runtime');
    const { describeTarget } = await import('../client/connection');
    if (options.scripted && process.env.ORCHARD_MODEL_URL) log(`--scripted ${options.scripted}: ORCHARD_MODEL_URL is ignored`);
    // First, before connecting anywhere: a worker without a model refuses to start.
    const provider = options.hostOnly
      ? undefined
      : await modelProviderFor(options.scripted ? { kind: 'scripted', scenario: resolve(options.scripted) } : { kind: 'configured' });
    const target = await resolveTarget();
    if (!target.databaseUrl) throw new OrchardError('invalid_input', 'set DATABASE_URL (or run `orchard dev`)');
    const { address, namespace, ...temporalOptions } = target.temporal;
    const orchard = await startOrchard(log, {
      hostOnly: options.hostOnly,
      provider,
      stack: {
        temporalAddress: address,
        namespace,
        temporalOptions,
        databaseUrl: target.databaseUrl,
        webUiUrl: target.webUiUrl,
        embedded: { temporal: false, postgres: target.databaseEmbedded === true },
        stop: async () => undefined,
      },
    });
    log(
      `worker for ${describeTarget(orchard.target)}: queue ${orchard.config.taskQueue}${options.hostOnly ? ' (host only)' : ''} + orchard-host-${orchard.config.hostId}`,
    );
    await runUntilStopped(orchard);
  });

const session = program.command('session').description('create, send to, inspect and cancel child sessions');

session
  .command('create')
  .description('start a session on its own worktree of a repository')
  .requiredOption('--repo <path>', "git repository on the session's host")
  .requiredOption('--title <text>', 'one line that says what the session is for')
  .option('--id <id>', 'session id (default: derived from the title)')
  .option('--task <text>', 'first task (`-`: read it from stdin)')
  .option('--context <text>', 'a handoff the session reads before its first task (`-`: read it from stdin)')
  .option('--host <id>', 'host that owns the worktree (default: this host)')
  .option('--agent <name>', 'agent profile name', 'coder')
  .option('--base <ref>', 'where the session branch starts (default: the repository HEAD)')
  .option('--scenario <file>', 'drive the model with a scripted scenario file instead of the worker default')
  .option('--max-steps <n>', 'model calls per turn', positiveInt)
  .option('--budget-tokens <n>', "tokens the session may spend on model calls (default: the worker's ORCHARD_DEFAULT_BUDGET_TOKENS)", positiveInt)
  .option('--request-id <id>', 'idempotency key: a retried create with the same key starts one session and queues its task once')
  .option('--json', 'print JSON')
  .action(async (o) => {
    await withClient(async (client) => {
      const sessionId: string = o.id ?? `${slugOf(o.title, 'session')}-${Date.now().toString(36)}`;
      if (o.task === '-' && o.context === '-') throw new OrchardError('invalid_input', 'stdin can be read once: give --task or --context as text');
      const context = o.context === undefined ? undefined : await textOrStdin(o.context);
      // A handoff that cannot be taken is refused before anything runs, the host's preflight included.
      const { startingContextProblem } = await import('../contract/messages');
      const problem = context === undefined ? undefined : startingContextProblem({ context }, undefined);
      if (problem) throw new OrchardError(problem.code, problem.message);
      await refuseBeforeStart(client, {
        host: o.host,
        repo: resolve(o.repo),
        baseRef: o.base,
        sessionId,
        scenario: o.scenario ? resolve(o.scenario) : undefined,
      });
      const result = await client.createSession({
        requestId: o.requestId,
        sessionId,
        title: o.title,
        repo: resolve(o.repo),
        task: o.task === undefined ? undefined : await textOrStdin(o.task),
        context,
        host: o.host,
        agent: o.agent,
        baseRef: o.base,
        model: o.scenario ? { provider: 'scripted', scenario: resolve(o.scenario) } : undefined,
        limits: o.maxSteps ? { maxStepsPerTurn: o.maxSteps } : undefined,
        budgetTokens: o.budgetTokens,
      });
      print(o.json, result, () => `${result.message} (${result.session.status}); send to it with: orchard session send ${sessionId} "<task>"`);
    });
  });

session
  .command('send <id> <task...>')
  .description('relay a task to an existing session (resumes it if idle); never creates one; a task of `-` is read from stdin')
  .option('--signal', 'fire-and-forget signal instead of an update')
  .option('--request-id <id>', 'idempotency key: a repeated send with the same key is queued once')
  .option('--wait', 'wait until the session has finished the task')
  .option('--json', 'print JSON')
  .action(async (id: string, words: string[], o) => {
    await withClient(async (client) => {
      const input = { task: await textOrStdin(words.join(' ')), requestId: o.requestId };
      if (o.signal) {
        await client.signalSend(id, input);
        console.log(`signalled ${id}`);
        return;
      }
      const result = await client.send(id, input);
      if (!o.wait)
        return print(
          o.json,
          result,
          () => `${id}: task ${result.taskId} queued at position ${result.position}${result.duplicate ? ' (duplicate request, not queued again)' : ''}`,
        );
      const before = await client.status(id);
      const view = await client.waitUntilSettled(id, { afterTurn: before.turnsCompleted + before.queued + (before.currentTask ? 1 : 0), timeoutMs: 3_600_000 });
      print(o.json, view, () => formatStatus(view));
      // The task's own turn (the newest, should the task have run more than once); none when it never ran.
      const turn = (await client.transcriptRefs(id)).turns.filter((r) => r.taskId === result.taskId).at(-1);
      if (turn?.outcome !== 'finished') process.exitCode = TURN_NOT_FINISHED_EXIT;
    });
  });

session
  .command('status <id>')
  .description("show a session's status, current task and last turn")
  .option('--json', 'print JSON')
  .action(async (id: string, o) => {
    await withClient(async (client, target) => {
      const view = await client.status(id);
      // What Temporal is retrying for it (a model endpoint that is down), and, with a database, the model that answered last.
      const pending = view.status === 'progressing' ? (await client.pendingCalls(id)).filter((p) => p.attempt > 1 || p.lastError) : [];
      const model = target.databaseUrl
        ? await withPool(target, 'the model', async (pool) => {
            const { rows } = await pool.query<{ provider: string; model: string }>(
              'SELECT provider, model FROM model_calls WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1',
              [id],
            );
            return rows[0] ? `${rows[0].model} (${rows[0].provider})` : undefined;
          })
        : undefined;
      const shown = { ...view, ...(model ? { model } : {}), ...(pending.length > 0 ? { retrying: pending } : {}) };
      print(o.json, shown, () =>
        [
          formatStatus(view),
          ...(model ? [`  model: ${model} (its last call)`] : []),
          ...pending.map(
            (p) =>
              `  retrying ${p.activity}: attempt ${p.attempt}${p.lastError ? `, last error: ${p.lastError}` : ''}${p.nextAttemptAt ? `, next at ${p.nextAttemptAt}` : ''}`,
          ),
        ].join('\n'),
      );
    });
  });

session
  .command('list')
  .description('list sessions (from Temporal visibility)')
  .option('--json', 'print JSON')
  .action(async (o) => {
    await withClient(async (client) => {
      const sessions = await client.list();
      print(o.json, sessions, () =>
        sessions.length === 0 ? 'no sessions' : sessions.map((s) => `${s.sessionId} | ${s.title} | ${s.agent} | ${s.status} | host ${s.host}`).join('\n'),
      );
    });
  });

session
  .command('budget <id> <tokens>')
  .description("raise (or set) a session's token budget; tasks that waited for budget run (a child's raise is carved from its orchestrator's or team's)")
  .option('--request-id <id>', 'idempotency key: a repeat with the same key changes nothing again')
  .option('--json', 'print JSON')
  .action(async (id: string, tokens: string, o) => {
    await withClient(async (client) => {
      const budget = await client.setBudget(id, Number(tokens), o.requestId);
      print(o.json, budget, () => `${id}:${budgetLine(budget)!.replace(/^ +budget/, ' budget')}`);
    });
  });

session
  .command('resolve-hold <id>')
  .description(
    'resolve a verification hold: a command of this isolated child changed what it must not; you dealt with it, and its worktree may run commands again',
  )
  .option('--note <text>', 'what you did about the change (recorded on the hold)')
  .option('--by <name>', 'who decided (recorded on the hold)', 'user')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const resolved = await client.resolveHold(id, { by: o.by, note: o.note });
      console.log(`${id}: hold ${resolved.holdId} (held ${resolved.heldAt} after \`${resolved.command}\`) resolved by ${resolved.resolvedBy}`);
    });
  });

session
  .command('log <id>')
  .description("the session's transcript from PostgreSQL, turn by turn: each task, the model's answers and tool calls, and the tool results it was shown")
  .option('--turn <n>', 'only this turn', positiveInt)
  .option('--json', 'print the entries as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client, target) => {
      const view = await client.status(id);
      const entries = await withPool(target, `session log ${id}`, async (pool) => {
        const { readTranscript } = await import('../activities/store/transcript');
        return view.executionId ? readTranscript(pool, view.executionId, { turn: o.turn }) : [];
      });
      print(o.json, entries, () => (entries.length === 0 ? `${id}: no transcript yet` : formatTranscript(entries, { full: true })));
    });
  });

session
  .command('diff <id>')
  .description("the session's branch against the commit it started from, and what its worktree holds uncommitted (on the session's host)")
  .option('--json', 'print {branch, base, head, committed, uncommitted, untracked} as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const view = await client.status(id);
      if (view.host !== client.defaultHost) {
        throw new OrchardError(
          'host_unavailable',
          `session ${id}'s repository is on host ${view.host}, not this one (${client.defaultHost}): run the diff there`,
        );
      }
      if (!view.branch)
        throw new OrchardError('branch_not_found', `session ${id} has no branch yet (${view.status}): its worktree is being prepared or never was`);
      const { sessionDiff } = await import('../activities/git/worktree');
      const diff = await sessionDiff({ repo: view.repo, branch: view.branch, worktree: view.worktree });
      print(o.json, diff, () =>
        [
          `# ${diff.branch}: ${diff.base.slice(0, 12)}..${diff.head.slice(0, 12)}`,
          diff.committed.trimEnd() || '(no committed change)',
          ...(diff.uncommitted !== undefined ? ['', '# uncommitted in the worktree', diff.uncommitted.trimEnd() || '(none)'] : []),
          ...(diff.untracked.length > 0 ? ['', `# untracked (${diff.untracked.length})`, ...diff.untracked] : []),
        ].join('\n'),
      );
    });
  });

session
  .command('watch <id>')
  .description('follow a session live until its turn ends: status changes and, with PostgreSQL, each model answer, tool call and result as it is recorded')
  .option('--interval <ms>', 'how often to look', positiveInt, 500)
  .option('--timeout <seconds>', 'give up after this long', positiveInt, 3600)
  .option('--json', 'print one JSON object per line: {status} or {entry}')
  .action(async (id: string, o) => {
    await withClient(async (client, target) => {
      const { readTranscript } = await import('../activities/store/transcript');
      const { createPool } = await import('../activities/store/db');
      const pool = target.databaseUrl ? createPool(target.databaseUrl, { max: 1, embedded: target.databaseEmbedded }) : undefined;
      const emit = (json: unknown, text: string) => console.log(o.json ? JSON.stringify(json) : text);
      try {
        let lastLine = '';
        let afterSeq: number | undefined;
        const deadline = Date.now() + o.timeout * 1000;
        for (;;) {
          const view = await client.status(id);
          if (pool && view.executionId) {
            // From where the watch started: the turn in progress in full, earlier turns not at all.
            const entries = await readTranscript(pool, view.executionId, {
              afterSeq,
              turn: afterSeq === undefined ? (view.currentTask?.turn ?? -1) : undefined,
            });
            for (const entry of entries) emit({ entry }, formatTranscript([entry], { full: false }));
            afterSeq = Math.max(afterSeq ?? 0, ...entries.map((e) => e.seq));
          }
          const line = `${view.status}${view.currentTask ? ` · turn ${view.currentTask.turn}: ${view.currentTask.excerpt}` : ''}${view.queued ? ` · ${view.queued} queued` : ''}`;
          if (line !== lastLine) emit({ status: view }, `[${id}] ${line}`);
          lastLine = line;
          const settled = view.status !== 'progressing' && view.queued === 0 && !view.currentTask;
          if (settled) {
            if (view.lastTurn)
              emit(
                { lastTurn: view.lastTurn },
                `[${id}] turn ${view.lastTurn.turn} ${view.lastTurn.outcome}${view.lastTurn.error ? `: ${view.lastTurn.error.code}: ${view.lastTurn.error.message}` : ''}`,
              );
            if (view.lastTurn && view.lastTurn.outcome !== 'finished') process.exitCode = TURN_NOT_FINISHED_EXIT;
            return;
          }
          if (Date.now() > deadline) throw new OrchardError('wait_timeout', `session ${id} is still ${view.status} after ${o.timeout} s`);
          await new Promise((r) => setTimeout(r, o.interval));
        }
      } finally {
        await pool?.end();
      }
    });
  });

session
  .command('cancel <id>')
  .description('cancel a session: stops its running command and closes it')
  .option('--reason <text>')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const view = await client.cancel(id, o.reason);
      console.log(`${id}: ${view.status}${view.closedAs ? ` (${view.closedAs})` : ''}`);
    });
  });

const orchestrator = program.command('orchestrator').description('start an orchestrator, send it messages, inspect its ledger and roster');

orchestrator
  .command('start <id>')
  .description('start orchestrator <id> (or find it running): it routes messages into child sessions on a repository')
  .requiredOption('--repo <path>', 'git repository its children work on (a path on the host)')
  .option('--host <id>', 'host whose disk holds the repository (default: this host)')
  .option('--title <text>', 'what the fleet works on')
  .option('--scripted <scenario>', 'play the orchestrator and its children with this scripted scenario (see scenarios/FORMAT.md, router)')
  .option('--budget-tokens <n>', 'tokens the orchestrator and all its children may spend together (children get budgets carved from it)', positiveInt)
  .action(async (id: string, o) => {
    const idProblem = sessionIdProblem(id);
    if (idProblem) throw new OrchardError('invalid_input', idProblem.replace(/^session id/, 'orchestrator id'));
    const repo = resolve(o.repo);
    const model = o.scripted ? ({ provider: 'scripted', scenario: resolve(o.scripted) } as const) : undefined;
    await withClient(async (client) => {
      await refuseBeforeStart(client, { host: o.host, repo, scenario: model?.scenario });
      await client.startOrchestrator({ orchestratorId: id, repo, host: o.host, title: o.title, model, childModel: model, budgetTokens: o.budgetTokens });
      console.log(`orchestrator ${id} is running; send it a message with: orchard orchestrator send ${id} "<message>"`);
    });
  });

orchestrator
  .command('send <id> <message...>')
  .description('send a user message (`-`: read it from stdin); prints its id (with --wait: the turn that answered it and where it was delivered)')
  .option('--request-id <id>', 'idempotency key: a repeated message with the same key is accepted once')
  .option('--wait', 'wait until the orchestrator has finished the turn that answers this message')
  .option('--timeout <seconds>', 'with --wait: how long to wait', positiveInt, 600)
  .option('--json', 'print JSON')
  .action(async (id: string, words: string[], o) => {
    await withClient(async (client) => {
      const result = await client.message(id, { text: await textOrStdin(words.join(' ')), requestId: o.requestId });
      if (!o.wait) {
        return print(o.json, result, () => `${id}: message ${result.messageId} accepted${result.duplicate ? ' (duplicate request, not queued again)' : ''}`);
      }
      const { turn, status } = await client.waitForMessageTurn(id, result.messageId, { timeoutMs: o.timeout * 1000 });
      if (turn.outcome !== 'finished') process.exitCode = TURN_NOT_FINISHED_EXIT;
      const deliveries = status.deliveries.filter((d) => d.messageId === result.messageId);
      print(o.json, { ...result, turn, deliveries }, () =>
        [
          `${id}: message ${result.messageId}: turn ${turn.turn} ${turn.outcome}${turn.finalExcerpt ? `: ${turn.finalExcerpt}` : ''}`,
          ...(turn.error ? [`  error: ${turn.error.code}: ${turn.error.message}`] : []),
          ...(deliveries.length === 0
            ? ['  delivered to no child']
            : deliveries.map((d) => `  -> ${d.childId} via ${d.via}${d.taskId ? ` (task ${d.taskId})` : ''}`)),
        ].join('\n'),
      );
    });
  });

orchestrator
  .command('status <id>')
  .description("the orchestrator's ledger: its children, recent turns and deliveries")
  .option('--json', 'print the status view as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const view = await client.orchestratorStatus(id);
      print(o.json, view, () => formatOrchestratorStatus(view));
    });
  });

orchestrator
  .command('budget <id> <tokens>')
  .description("raise (or set) an orchestrator's token budget, out of which its children's are carved; messages that waited for budget run")
  .option('--request-id <id>', 'idempotency key: a repeat with the same key changes nothing again')
  .option('--json', 'print JSON')
  .action(async (id: string, tokens: string, o) => {
    await withClient(async (client) => {
      const budget = await client.setOrchestratorBudget(id, Number(tokens), o.requestId);
      print(o.json, budget, () => `${id}:${budgetLine(budget)!.replace(/^ +budget/, ' budget')}`);
    });
  });

orchestrator
  .command('roster <id>')
  .description("the exact roster text the orchestrator's model gets now")
  .action(async (id: string) => {
    await withClient(async (client) => {
      process.stdout.write(`${await client.roster(id)}\n`);
    });
  });

registerRunCommands(orchestrator, 'orchestrator', { plural: 'orchestrators', sessions: 'the child sessions it started' });

const team = program.command('team').description('start a team run (a Coordinator over Members), send it messages, inspect its board and certificate');

team
  .command('start <id>')
  .description('start team <id> (or find it running): a Coordinator plans the goal as tasks on a board, Members do them in their own worktrees')
  .requiredOption('--repo <path>', 'git repository the members work on (a path on the host)')
  .requiredOption('--goal <text>', "the team's goal: the Coordinator's first message")
  .addOption(
    new Option('--member <id:Role>', 'a member (repeat it)')
      .argParser(collectMember)
      .default([], 'planner:Planner implementer:Implementer reviewer:Reviewer tester:Tester'),
  )
  .option('--host <id>', 'host whose disk holds the repository (default: this host)')
  .option('--scripted <scenario>', 'play the Coordinator and the members with this scripted scenario (see scenarios/FORMAT.md, coordinator)')
  .option('--handoff-slo <ms>', 'a handoff not released within this is an SLO miss (default 5000)')
  .option('--handoff-timeout <ms>', 'a handoff not released within this is durable timeout or unknown (default 10000)')
  .option('--verify <command>', 'delivered only when this command exits 0 on the result tree (run sandboxed on the team host, e.g. "npm test")')
  .option('--verify-timeout <ms>', 'how long the verify command may run (default 300000, at most 540000)')
  .option('--budget-tokens <n>', "tokens the Coordinator and all Members may spend together (Members' budgets are carved from it)", positiveInt)
  .action(async (id: string, o) => {
    const idProblem = sessionIdProblem(id);
    if (idProblem) throw new OrchardError('invalid_input', idProblem.replace(/^session id/, 'team id'));
    const repo = resolve(o.repo);
    const model = o.scripted ? ({ provider: 'scripted', scenario: resolve(o.scripted) } as const) : undefined;
    const members: { memberId: string; role: string }[] = o.member;
    await withClient(async (client) => {
      await refuseBeforeStart(client, { host: o.host, repo, scenario: model?.scenario });
      // Numbers as given (the client's check refuses what is not a whole number of milliseconds).
      const ms = (v: string | undefined) => (v === undefined ? undefined : /^\d+$/.test(v) ? Number(v) : (v as unknown as number));
      const handoff =
        o.handoffSlo === undefined && o.handoffTimeout === undefined
          ? undefined
          : {
              ...(o.handoffSlo === undefined ? {} : { sloMs: ms(o.handoffSlo) }),
              ...(o.handoffTimeout === undefined ? {} : { timeoutMs: ms(o.handoffTimeout) }),
            };
      if (o.verify === undefined && o.verifyTimeout !== undefined) throw new OrchardError('invalid_input', '--verify-timeout needs --verify');
      const verify =
        o.verify === undefined ? undefined : { command: o.verify as string, ...(o.verifyTimeout === undefined ? {} : { timeoutMs: ms(o.verifyTimeout) }) };
      await client.startTeam({
        teamId: id,
        repo,
        host: o.host,
        goal: o.goal,
        members: members.length > 0 ? members : undefined,
        model,
        memberModel: model,
        handoff,
        verify,
        budgetTokens: o.budgetTokens,
      });
      console.log(`team ${id} is running; follow it with: orchard team status ${id}`);
    });
  });

team
  .command('budget <id> <tokens>')
  .description("raise (or set) a team's token budget, out of which its Members' are carved; work that waited for budget goes on")
  .option('--request-id <id>', 'idempotency key: a repeat with the same key changes nothing again')
  .option('--json', 'print JSON')
  .action(async (id: string, tokens: string, o) => {
    await withClient(async (client) => {
      const budget = await client.setTeamBudget(id, Number(tokens), o.requestId);
      print(o.json, budget, () => `${id}:${budgetLine(budget)!.replace(/^ +budget/, ' budget')}`);
    });
  });

team
  .command('send <id> <message...>')
  .description("send a user message to the team's Coordinator (`-`: read it from stdin); prints its id")
  .option('--request-id <id>', 'idempotency key: a repeated message with the same key is accepted once')
  .option('--json', 'print JSON')
  .action(async (id: string, words: string[], o) => {
    await withClient(async (client) => {
      const result = await client.teamMessage(id, { text: await textOrStdin(words.join(' ')), requestId: o.requestId });
      print(o.json, result, () => `${id}: message ${result.messageId} accepted${result.duplicate ? ' (duplicate request, not queued again)' : ''}`);
    });
  });

team
  .command('status <id>')
  .description("the team's status, and from PostgreSQL (when DATABASE_URL or `orchard dev` gives one) its board and certificate")
  .option('--json', 'print {status, board, certificate} as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client, target) => {
      const status = await client.teamStatus(id);
      let record: Pick<import('./team-view').TeamReport, 'board' | 'certificate'> = { board: null, certificate: null };
      const { formatTeamReport, readTeamRecord } = await import('./team-view');
      if (target.databaseUrl) {
        const { createPool } = await import('../activities/store/db');
        const pool = createPool(target.databaseUrl, { max: 1, embedded: target.databaseEmbedded });
        try {
          record = await readTeamRecord(pool, id);
        } finally {
          await pool.end();
        }
      }
      const report = { status, ...record };
      print(o.json, report, () => formatTeamReport(report, { hasDatabase: target.databaseUrl !== undefined }));
    });
  });

team
  .command('reassign <id> <taskId>')
  .description('hand a running task to another member: the old execution is fenced and stopped, the replacement starts once it is quiescent')
  .requiredOption('--to <member>', 'the member who takes the task over')
  .requiredOption('--reason <text>', 'why (recorded on the old task and the receipt)')
  .option('--json', 'print the receipt as JSON')
  .action(async (id: string, taskId: string, o) => {
    await withClient(async (client) => {
      const receipt = await client.reassignTask(id, { taskId, newOwner: o.to, reason: o.reason });
      print(
        o.json,
        receipt,
        () => `${id}: ${receipt.receiptId} ${receipt.state}: ${receipt.oldTaskId} (${receipt.oldOwner}) → ${receipt.newTaskId} (${receipt.newOwner})`,
      );
    });
  });

team
  .command('cancel-task <id> <taskId>')
  .description("remove a task from the run's scope as the user: a waiting task is cancelled; running work is fenced and stopped (a receipt, no replacement)")
  .requiredOption('--reason <text>', 'why (recorded on the task and the user event the closure cites)')
  .option('--json', 'print the result as JSON')
  .action(async (id: string, taskId: string, o) => {
    await withClient(async (client) => {
      const result = await client.cancelTask(id, { taskId, reason: o.reason });
      print(
        o.json,
        result,
        () =>
          `${id}: ${result.taskId} cancelled at revision ${result.workRevision}${result.receipt ? `; ${result.receipt.receiptId} ${result.receipt.state} (its execution is being stopped)` : ''}`,
      );
    });
  });

for (const [action, description] of [
  ['pause', 'pause a team: no Coordinator turn and no execution starts; running work is fenced and stopped, its tasks wait for their owners'],
  ['resume', 'resume a paused team: paused tasks start again with their owners'],
  ['archive', 'abandon a team run: running work stopped, open tasks cancelled, Members’ sessions closed; it ends cancelled (or failed)'],
] as const) {
  team
    .command(`${action} <id>`)
    .description(description)
    .requiredOption('--reason <text>', 'why (recorded on the user event)')
    .option('--request-id <id>', `idempotency key: a repeated ${action} with the same key is done once and answers the same`)
    .option('--json', 'print the result as JSON')
    .action(async (id: string, o) => {
      await withClient(async (client) => {
        const result = await client.teamLifecycle(id, action, { reason: o.reason, requestId: o.requestId });
        print(o.json, result, () =>
          [
            `${id}: ${result.state} at revision ${result.workRevision}`,
            ...result.receipts.map((r) => `  ${r.receiptId}: ${r.oldTaskId} of ${r.oldOwner} fenced (${r.state})`),
            ...(result.cancelledTasks?.length ? [`  cancelled: ${result.cancelledTasks.join(', ')}`] : []),
          ].join('\n'),
        );
      });
    });
}

team
  .command('merge <id>')
  .description("merge a delivered team's result branch into its protected branch (refused without a certificate; a repeat changes nothing)")
  .option('--json', 'print the merge as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const merged = await client.mergeTeam(id);
      const how = { already_contained: 'already contained the result', fast_forward: 'fast-forwarded', merge_commit: 'merged with a merge commit' }[
        merged.mode
      ];
      print(
        o.json,
        merged,
        () =>
          `${id}: ${merged.protectedBranch} ${how}: ${merged.before.slice(0, 12)} → ${merged.after.slice(0, 12)} (result ${merged.resultBranch} at ${merged.resultHead.slice(0, 12)}, certificate ${merged.certificateId})`,
      );
    });
  });

team
  .command('verify <id>')
  .description("run a delivered team's verify command again on its certified tree: exit 0 when it still passes (the output may differ)")
  .option('--request-id <id>', 'idempotency key: a repeat with the same key answers the same run')
  .option('--json', 'print the result as JSON')
  .action(async (id: string, o) => {
    await withClient(async (client) => {
      const result = await client.verifyTeam(id, { requestId: o.requestId });
      const { run, certified } = result;
      print(o.json, result, () =>
        [
          `${id}: ${result.stillPasses ? 'still passes' : 'NO LONGER PASSES'} on ${run.resultHead.slice(0, 12)} (tree ${run.tree.slice(0, 12)}, certificate ${result.certificateId})`,
          `  \`${run.command}\` ${run.timedOut ? 'timed out' : `exited ${run.exitCode ?? 'by a signal'}`} after ${(run.durationMs / 1000).toFixed(1)} s; certified: exit ${certified.exitCode}, ${(certified.durationMs / 1000).toFixed(1)} s`,
          `  output ${result.outputMatches ? 'matches the certified digest' : `differs: ${run.outputDigest} (certified ${certified.outputDigest})`}`,
          ...(result.stillPasses ? [] : [`  output ends:\n${run.excerpt.replace(/^/gm, '    ')}`]),
        ].join('\n'),
      );
      if (!result.stillPasses) process.exitCode = VERIFY_FAILED_EXIT;
    });
  });

team
  .command('resolve-handoff <id> <receiptId> <action>')
  .description('resolve a handoff that timed out: keep_stopped (cancel only the replacement) or release (needs the old runtime quiescent)')
  .option('--reason <text>', 'why (recorded with the resolution)')
  .option('--json', 'print the receipt as JSON')
  .action(async (id: string, receiptId: string, action: string, o) => {
    if (action !== 'keep_stopped' && action !== 'release') throw new OrchardError('invalid_input', 'action must be keep_stopped or release');
    await withClient(async (client) => {
      const receipt = await client.resolveHandoff(id, { receiptId, action, reason: o.reason });
      print(o.json, receipt, () => `${id}: ${receipt.receiptId} ${receipt.state}, resolved ${receipt.resolution}`);
    });
  });

registerRunCommands(team, 'team', { plural: 'team runs', sessions: "its Members' sessions" });

program
  .command('demo <name>')
  .description('run a demo on the embedded stack (or the configured one): route-first, team, team-all-cancelled, or budget')
  .option(
    '--json',
    'print the result as JSON (progress goes to stderr): route-first {children, deliveries, messages, problems}; team {status, board, certificate, handoff, pause, verify, problems}; team-all-cancelled {status, board, certificate, closure, certificates, writer, problems}',
  )
  .option(
    '--scenario <file>',
    'the scenario (default scenarios/route-first.json, scenarios/team-handoff.json, scenarios/team-all-cancelled.json or scenarios/budget.json)',
  )
  .action(async (name: string, o) => {
    if (name !== 'route-first' && name !== 'team' && name !== 'team-all-cancelled' && name !== 'budget') {
      throw new OrchardError('invalid_input', `no demo ${JSON.stringify(name)}: the demos are route-first, team, team-all-cancelled and budget`);
    }
    const { startOrchard } = await import('../worker/runtime');
    const { makeFixtureRepo } = await import('../demos/fixture');
    // With --json, stdout carries the JSON alone.
    const { progress: progressOn } = await import('../worker/progress');
    const progress = await progressOn('[demo]', { stream: o.json ? process.stderr : process.stdout });
    const orchard = await startOrchard(progress, { model: { kind: 'demo' } });
    const print = (json: boolean | undefined, value: unknown, text: () => string) => {
      progress.end();
      printOut(json, value, text);
    };
    let failed = false;
    try {
      const repo = makeFixtureRepo(resolve(orchard.config.stateDir, 'demo'));
      if (name === 'budget') {
        const { runBudgetDemo, formatBudgetDemo } = await import('../demos/budget');
        const result = await runBudgetDemo(orchard.client, orchard.pool, {
          sessionId: `budget-${Date.now().toString(36)}`,
          repo,
          scenario: o.scenario ? resolve(o.scenario) : resolve(PROJECT_ROOT, 'scenarios/budget.json'),
          log: progress,
        });
        print(o.json, result, () => formatBudgetDemo(result));
        failed = result.problems.length > 0;
      } else if (name === 'team') {
        const { runTeamDemo, formatTeamDemo } = await import('../demos/team-demo');
        const result = await runTeamDemo(orchard.client, orchard.pool, {
          teamId: `team-${Date.now().toString(36)}`,
          repo,
          scenario: o.scenario ? resolve(o.scenario) : resolve(PROJECT_ROOT, 'scenarios/team-handoff.json'),
          log: progress,
        });
        const { status, board, certificate, handoff, pause, verify, problems } = result;
        print(o.json, { status, board, certificate, handoff: handoff ?? null, pause: pause ?? null, verify: verify ?? null, problems }, () =>
          formatTeamDemo(result),
        );
        failed = problems.length > 0;
      } else if (name === 'team-all-cancelled') {
        const { runTeamAllCancelledDemo, formatTeamAllCancelled } = await import('../demos/team-all-cancelled');
        const result = await runTeamAllCancelledDemo(orchard.client, orchard.pool, {
          teamId: `team-${Date.now().toString(36)}`,
          repo,
          scenario: o.scenario ? resolve(o.scenario) : resolve(PROJECT_ROOT, 'scenarios/team-all-cancelled.json'),
          log: progress,
        });
        const { status, board, certificate, closure, certificates, writer, problems } = result;
        print(o.json, { status, board, certificate, closure, certificates, writer, problems }, () => formatTeamAllCancelled(result));
        failed = problems.length > 0;
      } else {
        const { runRouteFirst, formatRouteFirst } = await import('../demos/route-first');
        const result = await runRouteFirst(orchard.client, {
          orchestratorId: `route-first-${Date.now().toString(36)}`,
          repo,
          scenario: o.scenario ? resolve(o.scenario) : resolve(PROJECT_ROOT, 'scenarios/route-first.json'),
          log: progress,
        });
        print(o.json, result, () => formatRouteFirst(result));
        failed = result.problems.length > 0;
      }
    } finally {
      await orchard.stop();
      progress.end(!failed);
    }
    process.exit(failed ? 1 : 0);
  });

registerGuardCommand(program);
registerExecCommand(program);
registerSandboxCommand(program);
registerBoardCommand(program);
registerCodecServerCommand(program);

/** The transcript as text: a header per turn, `user` / `assistant` / `tool` entries; `full: false` cuts long ones. */
function formatTranscript(entries: readonly TranscriptEntry[], { full }: { full: boolean }): string {
  const cut = (text: string, max: number) => (full || text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more chars)`);
  const lines: string[] = [];
  let turn: number | undefined;
  for (const e of entries) {
    if (e.turn !== turn && full) lines.push(`${lines.length > 0 ? '\n' : ''}── turn ${e.turn}${e.taskId ? ` (task ${e.taskId})` : ''} ──`);
    turn = e.turn;
    if (e.role === 'user') lines.push(`user: ${cut(e.content ?? '', 400)}`);
    else if (e.role === 'assistant') {
      if (e.content) lines.push(`assistant: ${cut(e.content, 400)}`);
      for (const c of e.toolCalls ?? []) lines.push(`  → ${c.name} ${cut(c.arguments, 300)}`);
    } else lines.push(`  ← ${cut(e.content ?? '', full ? Infinity : 300).replace(/\n/g, '\n    ')}`);
  }
  return lines.join('\n');
}

/** `list` and `cancel` for orchestrators and team runs: the same two commands over `listRuns` and `cancelRun`. */
function registerRunCommands(parent: Command, kind: 'orchestrator' | 'team', words: { plural: string; sessions: string }): void {
  parent
    .command('list')
    .description(`list ${words.plural} (from Temporal visibility)`)
    .option('--json', 'print JSON')
    .action(async (o) => {
      await withClient(async (client) => {
        const runs = await client.listRuns(kind);
        print(o.json, runs, () => formatRuns(runs, words.plural));
      });
    });
  parent
    .command('cancel <id>')
    .description(`cancel the ${kind === 'team' ? 'team run' : kind} and close ${words.sessions} (a repeat closes what is still open)`)
    .option('--reason <text>', 'why (recorded on each session it closes)')
    .option('--json', 'print JSON')
    .action(async (id: string, o) => {
      await withClient(async (client) => {
        const result = await client.cancelRun(kind, id, { reason: o.reason });
        print(o.json, result, () => formatCancelRun(result));
      });
    });
}

function formatRuns(runs: RunSummary[], what: string): string {
  if (runs.length === 0) return `no ${what}`;
  return table(
    ['id', 'status', 'execution', 'host', 'started'],
    runs.map((r) => [r.id, r.status, r.execution, r.host, r.startTime.toISOString()]),
  ).join('\n');
}

function formatCancelRun(result: CancelRunResult): string {
  const closed = result.sessionsClosed.length === 0 ? 'no session was open' : `closed ${result.sessionsClosed.join(', ')}`;
  return `${result.kind} ${result.id}: ${result.alreadyClosed ? `already closed (${result.execution})` : result.execution}; ${closed}`;
}

function formatOrchestratorStatus(view: OrchestratorStatusView): string {
  const lines = [`orchestrator ${view.orchestratorId} | ${view.status} | ${view.turnsCompleted} turn(s) done, ${view.queued} queued, run ${view.runIndex}`];
  const budget = budgetLine(view.budget);
  if (budget) lines.push(budget);
  lines.push('', `children (${view.children.length}):`);
  if (view.children.length === 0) lines.push('  none');
  else
    lines.push(
      ...table(
        ['id', 'title', 'agent', 'topic', 'status'],
        view.children.map((c) => [c.childId, c.title, c.agent, c.topicKey ?? '-', c.status]),
      ),
    );
  lines.push('', `turns (${view.turns.length} most recent):`);
  if (view.turns.length === 0) lines.push('  none');
  else {
    lines.push(
      ...table(
        ['turn', 'message', 'outcome', 'tool calls', 'answer'],
        view.turns.map((t) => [
          String(t.turn),
          t.taskId,
          t.outcome,
          String(t.toolCalls),
          t.error ? `${t.error.code}: ${t.error.message}` : (t.finalExcerpt ?? ''),
        ]),
      ),
    );
  }
  lines.push('', `deliveries (${view.deliveries.length} most recent):`);
  if (view.deliveries.length === 0) lines.push('  none');
  else
    lines.push(
      ...table(
        ['message', 'turn', 'child', 'via', 'task'],
        view.deliveries.map((d) => [d.messageId, String(d.turn), d.childId, d.via, d.taskId ?? '-']),
      ),
    );
  return lines.join('\n');
}

/** Columns padded to their widest cell, indented two spaces; cells are cut to one line. */
function table(header: string[], rows: string[][]): string[] {
  const clean = (cell: string) => {
    const line = cell.replace(/\s+/g, ' ').trim();
    return line.length > 80 ? `${line.slice(0, 79)}…` : line;
  };
  const all = [header, ...rows.map((r) => r.map(clean))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => `  ${r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')}`);
}

function formatStatus(view: SessionStatusView): string {
  const lines = [
    `${view.sessionId} | ${view.title} | ${view.agent} | ${view.status}${view.closedAs ? ` (${view.closedAs})` : ''}`,
    // A closed session that never got a worktree has none; only an open one is still preparing it.
    `  host ${view.host}, branch ${view.branch ?? (view.status === 'closed' ? '(none)' : '(preparing)')}, worktree ${view.worktree ?? (view.status === 'closed' ? '(none)' : '(preparing)')}`,
    `  ${view.turnsCompleted} turn(s) done, ${view.queued} queued, run ${view.runIndex}`,
  ];
  if (view.currentTask) lines.push(`  now: turn ${view.currentTask.turn}: ${view.currentTask.excerpt}`);
  if (view.lastTurn) {
    const l = view.lastTurn;
    lines.push(`  last: turn ${l.turn} ${l.outcome} after ${l.steps} step(s), ${l.toolCalls} tool call(s)${l.finalExcerpt ? `: ${l.finalExcerpt}` : ''}`);
  }
  if (view.tasks) {
    const c = view.tasks;
    lines.push(`  tasks: ${c.done} done, ${c.failed} failed, ${c.cancelled} cancelled, ${c.queued} queued${view.closing ? ' (closing)' : ''}`);
  }
  if (view.refusedSignals?.count) lines.push(`  refused signalled sends: ${view.refusedSignals.count} (latest: ${view.refusedSignals.recent.at(-1)?.code})`);
  const budget = budgetLine(view.budget);
  if (budget) lines.push(budget);
  if (view.error) lines.push(`  error: ${view.error.code}: ${view.error.message}`);
  return lines.join('\n');
}

interface Target {
  temporal: TemporalTarget;
  databaseUrl?: string;
  /** The database is the embedded PGlite of a running `orchard dev`. */
  databaseEmbedded?: boolean;
  webUiUrl?: string;
}

/**
 * Temporal as the Temporal CLI finds it (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TLS and API key variables, the
 * temporal.toml profile); with no address configured, the stack of a running `orchard dev` in this project.
 */
async function resolveTarget(): Promise<Target> {
  const target = await findTarget();
  errorContext = { address: target.temporal.address, namespace: target.temporal.namespace, taskQueue: workerConfigFromEnv().taskQueue };
  return target;
}

async function findTarget(): Promise<Target> {
  const config = workerConfigFromEnv();
  const { loadTemporalSettings } = await import('../client/connection');
  const settings = loadTemporalSettings();
  if (settings.address) return { temporal: { ...settings, address: settings.address }, databaseUrl: config.databaseUrl };
  const { readStackFile } = await import('../worker/stack');
  const stack = readStackFile(PROJECT_ROOT);
  if (stack) {
    return {
      temporal: { address: stack.temporalAddress, namespace: stack.namespace },
      databaseUrl: config.databaseUrl ?? stack.databaseUrl,
      databaseEmbedded: !config.databaseUrl && stack.databaseEmbedded === true,
      webUiUrl: stack.webUiUrl,
    };
  }
  throw new OrchardError(
    'temporal_unavailable',
    'no Temporal to talk to: set TEMPORAL_ADDRESS (or a temporal.toml profile), or start `orchard dev` in this project',
  );
}

/** Runs `fn` with a connection to the PostgreSQL that DATABASE_URL or a running `orchard dev` gives; `what` needs one. */
async function withPool<T>(target: Target, what: string, fn: (pool: import('pg').Pool) => Promise<T>): Promise<T> {
  if (!target.databaseUrl) throw new OrchardError('invalid_input', `${what} reads PostgreSQL: set DATABASE_URL (or run it beside \`orchard dev\`)`);
  const { createPool } = await import('../activities/store/db');
  const pool = createPool(target.databaseUrl, { max: 1, embedded: target.databaseEmbedded });
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

async function withClient(fn: (client: OrchardClient, target: Target) => Promise<void>): Promise<void> {
  const target = await resolveTarget();
  const config = workerConfigFromEnv();
  // Loaded here, not at the top: `--help`, `guard` and `board` never need the Temporal client.
  const { OrchardClient } = await import('../client/client');
  const client = await OrchardClient.connect({ ...target.temporal, taskQueue: config.taskQueue, defaultHost: config.hostId });
  try {
    await fn(client, target);
  } finally {
    await client.close();
  }
}

/**
 * What `session create`, `orchestrator start` and `team start` check before anything starts, so a refusal leaves
 * nothing behind: when the repository is on this host, it is a git repository with a commit to start from (the base
 * ref names one) and the scenario file reads as a scenario; and a worker serves the host. On another host the same
 * checks are made there (`checkOnHost`: a short workflow runs them on that host's queue).
 */
async function refuseBeforeStart(
  client: OrchardClient,
  o: { host?: string; repo: string; baseRef?: string; sessionId?: string; scenario?: string },
): Promise<void> {
  const host = o.host ?? client.defaultHost;
  if (host === client.defaultHost) {
    const { repositoryProblem } = await import('../activities/git/worktree');
    const problem = await repositoryProblem(o.repo, { baseRef: o.baseRef, sessionId: o.sessionId });
    if (problem) throw new OrchardError(problem.code, problem.message);
    if (o.scenario) {
      const { loadScenario } = await import('../activities/model/scenario');
      await loadScenario(o.scenario);
    }
  }
  if (!(await client.hostServed(host))) {
    throw new OrchardError(
      'host_unavailable',
      `no worker serves host ${host} (nothing polls orchard-host-${host}): start \`orchard worker\` there (ORCHARD_HOST_ID=${host}), ` +
        'or name a served host with --host',
    );
  }
  if (host !== client.defaultHost) {
    // The same checks, made where the repository is.
    const problem = await client.checkOnHost(host, { repo: o.repo, baseRef: o.baseRef, sessionId: o.sessionId, scenario: o.scenario });
    if (problem) throw new OrchardError(problem.code, problem.message);
  }
}

/**
 * Runs until the workers stop. SIGTERM or SIGINT stops polling; running activities get the grace period
 * (ORCHARD_SHUTDOWN_GRACE_SECONDS) to finish before the SDK cancels them. Then connections and the pool are
 * closed and the process exits: 0 after a signal, an error (mapped by main) when a worker failed.
 */
async function runUntilStopped(orchard: import('../worker/runtime').RunningOrchard, beforeStop?: () => void): Promise<void> {
  let signalled = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) {
      // A second Ctrl-C is an impatient human: leave now. A repeated SIGTERM keeps waiting out the grace period.
      if (signal === 'SIGINT') {
        log('SIGINT again: exiting without waiting for running activities');
        process.exit(130);
      }
      return;
    }
    signalled = true;
    log(`${signal}: no new work is taken; running activities have ${orchard.config.shutdownGraceSeconds}s to finish, ` + 'then they are cancelled');
    orchard.shutdown();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  let failure: unknown;
  await orchard.workersDone.catch((err: unknown) => {
    failure = err;
  });
  beforeStop?.();
  await orchard.stop();
  if (failure !== undefined) throw failure;
  log('stopped');
  process.exit(0);
}

function print(json: boolean | undefined, value: unknown, text: () => string): void {
  console.log(json ? JSON.stringify(value, null, 2) : text());
}
const printOut = print;

/** `--member implementer:Implementer`, repeatable: the member id, then its role. */
function collectMember(value: string, previous: { memberId: string; role: string }[]): { memberId: string; role: string }[] {
  const at = value.indexOf(':');
  const memberId = at < 0 ? '' : value.slice(0, at).trim();
  const role = at < 0 ? '' : value.slice(at + 1).trim();
  if (!memberId || !role) throw new InvalidArgumentError('give a member as <id>:<Role>, e.g. implementer:Implementer');
  return [...previous, { memberId, role }];
}

/** A task or message given as `-` is read from stdin (a task longer than one argument may be: the OS limits those). */
async function textOrStdin(text: string): Promise<string> {
  if (text !== '-') return text;
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The version in package.json, read where bin/orchard runs from. */
function packageVersion(): string {
  return (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

/**
 * Every failure ends as one `orchard: <code>: <what to do>` line on stderr — or, when the command was asked for
 * `--json`, as `{"error":{"code","message"}}` on stdout, where a script reads its answer — with exit 2 when typed,
 * 1 when internal.
 */
export async function main(argv = process.argv): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (err) {
    const failure = describeCliError(err, errorContext);
    if (argv.slice(2).includes('--json')) console.log(JSON.stringify({ error: { code: failure.code, message: failure.message } }));
    else console.error(`orchard: ${failure.code}: ${failure.message}`);
    if (process.env.ORCHARD_DEBUG) console.error(err);
    process.exit(failure.exitCode);
  }
}

if (require.main === module) void main();
