import { memberSessionId } from '../contract/member-session';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { OpenAICompatibleProvider } from '../activities/model/openai';
import { makeFixtureRepo } from '../demos/fixture';
import type { TeamStatusView } from '../contract/messages';
import { startOrchard } from '../worker/runtime';
import { completion, stubModel, type Reply } from '../test/helpers/model-stub';

/**
 * Handoff latency on the real stack (embedded Temporal dev server and Postgres, real sessions and bash): a team
 * whose writer member runs a long writer for each task; each task is reassigned to another member while it
 * writes. Measured per handoff: the `reassignTask` update's round trip (the fence committed) and the time until
 * the receipt is `released` (old session closed, its process groups gone), against the 5 s SLO. The status is
 * read every 20 ms, so figures carry that granularity. Printed, never asserted.
 */
const HANDOFFS = Number(process.env.BENCH_HANDOFFS ?? 5);
const SLO_MS = 5_000;

const call = (name: string, args: unknown, id: string): Reply =>
  completion({ content: null, tool_calls: [{ id, type: 'function', function: { name, arguments: JSON.stringify(args) } }] }, 'tool_calls');

function model(body: any): Reply {
  const last = body.messages.at(-1);
  const coordinator = (body.tools ?? []).some((tool: any) => tool.function.name === 'task_list');
  if (coordinator) {
    if (last.role === 'user' && String(last.content).startsWith('Write')) {
      return completion(
        {
          content: null,
          tool_calls: [
            ...Array.from({ length: HANDOFFS }, (_, i) => ({
              id: `c${i}`,
              type: 'function',
              function: {
                name: 'task_create',
                arguments: JSON.stringify({ taskId: `w${i + 1}`, title: `Write ${i + 1}`, description: 'write', owner: 'writer' }),
              },
            })),
            { id: 'approve', type: 'function', function: { name: 'plan_approve', arguments: '{}' } },
          ],
        },
        'tool_calls',
      );
    }
    return completion({ content: 'ok' });
  }
  if (last.role === 'tool') return completion({ content: 'done' });
  const writer = /^You are writer,/.test(String(body.messages[0].content));
  return call('bash', { command: writer ? 'for i in $(seq 1 600); do date +%s%N >> writer.log; sleep 0.05; done' : 'date +%s%N >> other.log' }, 'b');
}

const percentile = (sorted: readonly number[], p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];

export async function benchHandoff(after?: (orchard: Awaited<ReturnType<typeof startOrchard>>) => Promise<void>): Promise<void> {
  const teardowns: (() => unknown)[] = [];
  const stub = await stubModel({ teardown: (fn) => void teardowns.push(fn) }, model);
  const orchard = await startOrchard(() => undefined, { provider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: 30_000 }) });
  try {
    const { client } = orchard;
    const teamId = `bench-${Date.now().toString(36)}`;
    await client.startTeam({
      teamId,
      repo: makeFixtureRepo(resolve(orchard.config.stateDir, 'bench')),
      goal: 'Write logs',
      members: [
        { memberId: 'writer', role: 'Writer' },
        { memberId: 'other', role: 'Other' },
      ],
    });
    const status = () => client.teamStatus(teamId);
    const until = async <T>(probe: (v: TeamStatusView) => T | undefined, what: string): Promise<T> => {
      const deadline = Date.now() + 120_000;
      for (;;) {
        const found = probe(await status());
        if (found !== undefined) return found;
        if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const fences: number[] = [];
    const releases: number[] = [];
    for (let i = 1; i <= HANDOFFS; i++) {
      const taskId = `w${i}`;
      // The writer is writing this task: its execution runs and its log grows.
      await until((v) => (v.executions.some((e) => e.taskId === taskId && e.state === 'running') ? true : undefined), `${taskId} running`);
      const lines = async () => {
        const s = await client.status(memberSessionId(teamId, 'writer')).catch(() => undefined);
        const path = s?.worktree ? join(s.worktree, 'writer.log') : undefined;
        return path && existsSync(path) ? readFileSync(path, 'utf8').split('\n').length : 0;
      };
      const before = await lines();
      while ((await lines()) <= before + 2) await new Promise((r) => setTimeout(r, 20));
      const t0 = performance.now();
      const receipt = await client.reassignTask(teamId, { taskId, newOwner: 'other', reason: 'bench' });
      fences.push(performance.now() - t0);
      await until((v) => (v.receipts.find((r) => r.receiptId === receipt.receiptId)?.state === 'released' ? true : undefined), `${taskId} released`);
      releases.push(performance.now() - t0);
    }
    fences.sort((a, b) => a - b);
    releases.sort((a, b) => a - b);
    const row = (name: string, xs: number[]) =>
      `  ${name.padEnd(34)} n ${xs.length}  p50 ${percentile(xs, 50).toFixed(0).padStart(5)} ms  max ${xs[xs.length - 1].toFixed(0).padStart(5)} ms`;
    console.log(`handoff on the embedded stack (${HANDOFFS} reassigns of a running writer; SLO ${SLO_MS} ms):`);
    console.log(row('reassignTask answered (fenced)', fences));
    console.log(row('receipt released (old runtime gone)', releases));
    console.log(
      `  released within the SLO: ${releases.filter((x) => x <= SLO_MS).length}/${releases.length}; p50 is ${((percentile(releases, 50) / SLO_MS) * 100).toFixed(0)}% of the SLO`,
    );
  } finally {
    if (after) await after(orchard);
    await orchard.stop();
    for (const fn of teardowns.reverse()) await fn();
  }
}

if (require.main === module) {
  benchHandoff().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
