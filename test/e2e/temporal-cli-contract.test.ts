import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import test, { type ExecutionContext } from 'ava';
import type { z } from 'zod';
import { parseScenario } from '../../activities/model/scenario';
import { ScriptedProvider } from '../../activities/model/scripted';
import { WORKFLOWS, type WorkflowSchema } from '../../contract/schema';
import { resolveTemporalCli } from '../../worker/temporal-cli';
import { gitIn } from '../helpers/git';
import { makeRepo, sharedOrchard, testStackEnv, uniqueId } from '../helpers/orchard';
import { waitFor } from '../helpers/wait';

/**
 * Each kind of workflow driven by the `temporal` CLI alone: the commands of docs/contract.md ("With the `temporal`
 * CLI alone"), run as written with this test's ids, queue, repository and host, against a worker whose model is
 * scripted (as `orchard worker --scripted <scenario>` runs). Every input the doc sends and every answer the
 * workflows give is parsed with the contract's zod schemas (contract/schema.ts): a schema that says less, more or
 * otherwise than the workflow answers fails here.
 */
const run = promisify(execFile);
const DOC = readFileSync(join(__dirname, '../../docs/contract.md'), 'utf8');

/** One session turn per task: a bash command that leaves a line per turn in the worktree, then a final answer. */
const SCENARIO = parseScenario(
  {
    name: 'contract-cli',
    turns: [
      {
        steps: [{ tool_calls: [{ name: 'bash', arguments: { command: 'echo "turn {{turn}}" >> turns.log' } }] }, { content: 'Done with turn {{turn}}.' }],
        repeat: true,
      },
    ],
    router: { topics: [{ title: 'Login page test', topic: 'login-test', keywords: ['login'] }] },
    coordinator: {
      tasks: [{ taskId: 'write-notes', title: 'Write NOTES.md', description: 'Write NOTES.md and commit it on your branch.', owner: 'implementer' }],
    },
    members: {
      implementer: [
        {
          steps: [
            { tool_calls: [{ name: 'write_file', arguments: { path: 'NOTES.md', content: '# Notes\n' } }] },
            { tool_calls: [{ name: 'git_commit', arguments: { message: 'add NOTES.md' } }] },
            { content: 'Wrote and committed NOTES.md.' },
          ],
        },
      ],
    },
  },
  'contract-cli',
);

const shared = sharedOrchard(test, { defaultProvider: new ScriptedProvider(SCENARIO) });
let cliPath: Promise<string> | undefined;

/** The commands of the doc's block marked `<!-- contract-cli: <name> -->`, as argument lists (shell quoting undone). */
function docCommands(name: string): string[][] {
  const marker = `<!-- contract-cli: ${name} -->\n\`\`\`sh\n`;
  const start = DOC.indexOf(marker);
  if (start < 0) throw new Error(`docs/contract.md has no block ${name}`);
  const body = DOC.slice(start + marker.length, DOC.indexOf('\n```', start + marker.length));
  return body
    .replace(/\\\n/g, ' ')
    .split('\n')
    .filter((line) => line.trim() !== '' && !line.trim().startsWith('#'))
    .map((line) => {
      const words = [...line.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]);
      if (words[0] !== 'temporal') throw new Error(`not a temporal command: ${line}`);
      return words.slice(1);
    });
}

interface Place {
  ids: Record<string, string>;
  repo: string;
}

const kindOf = (workflowId: string): WorkflowSchema => {
  const kind = WORKFLOWS.find((w) => workflowId.startsWith(w.workflowId.split('<')[0]) && !workflowId.includes('/task/'));
  if (!kind) throw new Error(`no workflow kind has ids like ${workflowId}`);
  return kind;
};
const flag = (args: string[], name: string): string | undefined => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args[i + 1];
};
const parse = (t: ExecutionContext, schema: z.ZodType, value: unknown, what: string): any => {
  const parsed = schema.safeParse(value);
  if (!parsed.success) t.fail(`${what} does not match its schema: ${parsed.error.message}\n${JSON.stringify(value).slice(0, 2000)}`);
  return value;
};

/** Runs one `temporal` command against the test's dev server; the answer is its JSON output. */
async function temporal(args: string[]): Promise<{ code: number; out: any; stderr: string }> {
  const env = testStackEnv();
  cliPath ??= resolveTemporalCli(() => undefined);
  // Payloads raw (base64 of the bytes the workflow wrote): the CLI's JSON shorthand re-encodes them (an empty list
  // becomes null), and what is checked here is what any client receives.
  const argv = [...args, '--address', env.temporalAddress, '--namespace', env.namespace, '-o', 'json', '--no-json-shorthand-payloads'];
  try {
    const { stdout, stderr } = await run(await cliPath, argv, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, out: stdout.trim() === '' ? undefined : JSON.parse(stdout), stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, out: undefined, stderr: `${e.stderr ?? ''}${e.stdout ?? ''}` };
  }
}

/**
 * Runs a doc command with this test's names, checking the inputs it sends and the answer it gets against the
 * schemas of its workflow kind and handler; returns the answer (an update's or query's result, a workflow's result).
 */
async function docCommand(t: ExecutionContext, place: Place, words: string[], options: { refused?: string } = {}): Promise<any> {
  const args = words.map((word, i) => {
    if (words[i - 1] === '--task-queue') return shared().taskQueue;
    let w = word.replaceAll('/srv/repo', place.repo).replaceAll('build-1', shared().hostId);
    for (const [doc, own] of Object.entries(place.ids)) w = w.replaceAll(doc, own);
    return w;
  });
  const what = `temporal ${args.slice(0, 3).join(' ')}`;
  const verb = args.slice(1, args[1] === 'update' ? 3 : 2).join(' ');
  const kind = kindOf(flag(args, '--workflow-id')!);
  const handler = (type: 'signal' | 'update' | 'query', name: string) => {
    const found = kind.messages.find((m) => m.kind === type && m.name === name);
    if (!found) throw new Error(`${kind.workflowType} has no ${type} ${name}`);
    return found;
  };
  const input = (name: string) => {
    const text = flag(args, name);
    return text === undefined ? undefined : JSON.parse(text);
  };

  if (verb === 'start' || verb === 'execute-update-with-start') parse(t, kind.input, input('--input'), `${what}: the start input`);
  const message =
    verb === 'update execute'
      ? handler('update', flag(args, '--name')!)
      : verb === 'execute-update-with-start'
        ? handler('update', flag(args, '--update-name')!)
        : verb === 'signal'
          ? handler('signal', flag(args, '--name')!)
          : verb === 'query'
            ? handler('query', flag(args, '--name')!)
            : undefined;
  const sent = input(verb === 'execute-update-with-start' ? '--update-input' : '--input');
  if (message?.input) parse(t, message.input, sent, `${what}: the ${message.kind} ${message.name} input`);
  else if (message) t.is(sent, undefined, `${what}: ${message.name} takes no input`);

  const answer = await temporal(args);
  if (options.refused) {
    t.not(answer.code, 0, `${what} should be refused`);
    t.regex(answer.stderr, new RegExp(options.refused), what);
    return undefined;
  }
  t.is(answer.code, 0, `${what}: ${answer.stderr}`);
  const out = answer.out;
  if (verb === 'update execute') return parse(t, message!.result!, payloadAt(out, ['result']), `${what}: the ${message!.name} result`);
  if (verb === 'execute-update-with-start') return parse(t, message!.result!, payloadAt(out, ['updateResult']), `${what}: the ${message!.name} result`);
  if (verb === 'query') return parse(t, message!.result!, payloadAt(out, ['queryResult', 'payloads', 0]), `${what}: the ${message!.name} result`);
  if (verb === 'result') return parse(t, kind.result, payloadAt(out, ['result']), `${what}: the workflow's result`);
  return out;
}

/**
 * The value at `path` of the CLI's output: a raw payload (`{metadata, data}`, data the base64 of the JSON the workflow
 * wrote) decoded, or the value itself where the CLI prints it as JSON (update results, whatever the flag).
 */
function payloadAt(out: any, path: (string | number)[]): unknown {
  let v = out;
  for (const key of path) v = v?.[key];
  if (v === undefined) throw new Error(`nothing at ${path.join('.')} of ${JSON.stringify(out)}`);
  return typeof v?.data === 'string' && v.metadata ? JSON.parse(Buffer.from(v.data, 'base64').toString('utf8')) : v;
}

/** The kind's `status` query through the CLI, until `done` holds. */
async function statusUntil(t: ExecutionContext, workflowId: string, done: (view: any) => boolean, what: string, timeoutMs = 90_000): Promise<any> {
  const schema = kindOf(workflowId).messages.find((m) => m.kind === 'query' && m.name === 'status')!.result!;
  let last: any;
  try {
    return await waitFor(
      async () => {
        const answer = await temporal(['workflow', 'query', '--workflow-id', workflowId, '--name', 'status']);
        if (answer.code !== 0) return undefined;
        last = parse(t, schema, payloadAt(answer.out, ['queryResult', 'payloads', 0]), `${workflowId} status`);
        return done(last) ? last : undefined;
      },
      timeoutMs,
      what,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last status: ${JSON.stringify(last)}`);
  }
}

test('a session driven by the temporal CLI alone: start with a task, send (update and signal), status, transcriptRefs, cancel, result', async (t) => {
  const place: Place = { ids: { 'fix-login': uniqueId('cli-session') }, repo: makeRepo() };
  const workflowId = `session/${place.ids['fix-login']}`;
  const [start, send, signal, status, refs] = docCommands('session drive');

  t.is((await docCommand(t, place, start)).workflowId, workflowId);
  const sent = await docCommand(t, place, send);
  t.false(sent.duplicate);
  await docCommand(t, place, signal);
  await docCommand(t, place, status);

  // Three tasks (the start's, the update's, the signal's), each a turn of the scripted model in the worktree.
  const idle = await statusUntil(t, workflowId, (v) => v.status === 'idle' && v.tasks?.done === 3, 'three tasks done');
  t.is(idle.turnsCompleted, 3);
  t.is(idle.lastTurn.finalExcerpt, 'Done with turn 3.');
  t.is(readFileSync(join(idle.worktree, 'turns.log'), 'utf8'), 'turn 1\nturn 2\nturn 3\n');
  t.true(idle.recentTasks.some((task: any) => task.taskId === sent.taskId && task.state === 'done'));
  const transcript = await docCommand(t, place, refs);
  t.deepEqual(
    transcript.turns.map((turn: any) => turn.outcome),
    ['finished', 'finished', 'finished'],
  );
  // The same send again: answered as a duplicate, nothing queued.
  const again = await docCommand(t, place, send);
  t.like(again, { taskId: sent.taskId, duplicate: true });

  const [cancel, result] = docCommands('session close');
  t.is((await docCommand(t, place, cancel)).status, 'closed');
  const final = await docCommand(t, place, result);
  t.is(final.status, 'closed');
  t.is(final.tasks.done, 3);
});

test('a session created with update-with-start by the temporal CLI: created, then bound with the same shape', async (t) => {
  const place: Place = { ids: { 'fix-login': uniqueId('cli-uws') }, repo: makeRepo() };
  const [words] = docCommands('session create');
  const created = await docCommand(t, place, words);
  t.is(created.outcome, 'created');
  t.like(created.task, { duplicate: false, position: 0 });
  // A second create with another request id binds to the running session: no second agent.
  const bound = await docCommand(
    t,
    place,
    words.map((w) => w.replaceAll('create-1', 'create-2')),
  );
  t.is(bound.outcome, 'bound');
  t.is(bound.session.sessionId, place.ids['fix-login']);
  await statusUntil(t, `session/${place.ids['fix-login']}`, (v) => v.status === 'idle' && v.tasks?.done === 2, 'both tasks done');
  await temporal(['workflow', 'update', 'execute', '--workflow-id', `session/${place.ids['fix-login']}`, '--name', 'cancel', '--input', '{}']);
});

test('an orchestrator driven by the temporal CLI alone: start, message, status, roster, start query, cancel', async (t) => {
  const place: Place = { ids: { 'web-fleet': uniqueId('cli-fleet') }, repo: makeRepo() };
  const workflowId = `orchestrator/${place.ids['web-fleet']}`;
  const [start, message, status, roster, settings] = docCommands('orchestrator drive');

  t.is((await docCommand(t, place, start)).workflowId, workflowId);
  const accepted = await docCommand(t, place, message);
  t.false(accepted.duplicate);
  await docCommand(t, place, status);

  // The scripted router creates a child for the login topic; the child's turn ends and the orchestrator settles.
  const settled = await statusUntil(
    t,
    workflowId,
    (v) => v.status === 'idle' && v.children.length === 1 && v.children[0].status === 'idle' && v.children[0].turnEnds === 1,
    'the child created and its turn reported',
  );
  const child = settled.children[0];
  t.like(child, { title: 'Login page test', topicKey: 'login-test' });
  t.deepEqual(
    settled.deliveries.map((d: any) => [d.messageId, d.childId, d.via]),
    [[accepted.messageId, child.childId, 'create']],
  );
  t.true((await docCommand(t, place, roster)).includes(`${child.childId} | Login page test`));
  t.like(await docCommand(t, place, settings), { orchestratorId: place.ids['web-fleet'], repo: place.repo, title: 'Web fleet' });
  // The same message again: the first answer, nothing routed again.
  t.like(await docCommand(t, place, message), { messageId: accepted.messageId, duplicate: true });

  const [cancel] = docCommands('orchestrator close');
  await docCommand(t, place, cancel);
  const described = await temporal(['workflow', 'describe', '--workflow-id', workflowId]);
  t.is(described.out?.workflowExecutionInfo?.status, 'WORKFLOW_EXECUTION_STATUS_CANCELED', JSON.stringify(described.out?.workflowExecutionInfo));
  // Its child outlives it, and is closed by its own cancel update.
  const childClosed = await temporal(['workflow', 'update', 'execute', '--workflow-id', `session/${child.childId}`, '--name', 'cancel', '--input', '{}']);
  t.is(childClosed.code, 0, childClosed.stderr);
  t.is(parse(t, kindOf('session/x').result, payloadAt(childClosed.out, ['result']), 'the child cancel result').status, 'closed');
});

test('a team run driven by the temporal CLI alone: start, status, message, a refused cancelTask, delivered, mergeTeam, cancel', async (t) => {
  const repo = makeRepo();
  const place: Place = { ids: { 'notes-team': uniqueId('cli-team') }, repo };
  const workflowId = `team/${place.ids['notes-team']}`;
  const [start, status, message, cancelTask] = docCommands('team drive');

  t.is((await docCommand(t, place, start)).workflowId, workflowId);
  await docCommand(t, place, status);
  t.false((await docCommand(t, place, message)).duplicate);
  await docCommand(t, place, cancelTask, { refused: 'task_not_found' });

  // The scripted Coordinator plans one task for the Implementer, who writes and commits NOTES.md; the run is
  // certified and delivered.
  const delivered = await statusUntil(t, workflowId, (v) => v.status === 'delivered' && v.certificate !== undefined, 'the run delivered', 150_000);
  t.deepEqual(delivered.certificate.taskIds, ['write-notes']);
  t.true(delivered.executions.some((e: any) => e.taskId === 'write-notes' && e.state === 'completed'));
  t.is(delivered.receipts.length, 0);

  const [merge, cancel] = docCommands('team close');
  const merged = await docCommand(t, place, merge);
  t.like(merged, { teamId: place.ids['notes-team'], certificateId: delivered.certificate.certificateId, protectedBranch: 'main' });
  t.is(gitIn(repo, 'show', 'main:NOTES.md'), '# Notes');
  t.is(gitIn(repo, 'rev-parse', 'main'), merged.after);
  // The same update id again: Temporal answers the first result.
  t.deepEqual(await docCommand(t, place, merge), merged);

  await docCommand(t, place, cancel);
  const described = await temporal(['workflow', 'describe', '--workflow-id', workflowId]);
  t.not(described.out?.workflowExecutionInfo?.status, 'WORKFLOW_EXECUTION_STATUS_RUNNING', JSON.stringify(described.out?.workflowExecutionInfo));
});
