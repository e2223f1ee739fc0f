import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { CommandSlots } from '../../activities/bash/command-slots';
import { buildCommandEnv } from '../../activities/bash/env';
import { runBash, type RunBashInput } from '../../activities/bash/runner';
import { maxCommandsFromEnv, workerConfigFromEnv } from '../../worker/config';

const root = mkdtempSync(path.join(tmpdir(), 'orchard-slots-'));
test.after.always(() => rmSync(root, { recursive: true, force: true }));
const env = buildCommandEnv({ worktree: root, sessionId: 'slots', branch: 'orchard/slots' });
const run = (command: string, extra: Partial<RunBashInput> = {}) => runBash({ command, cwd: root, env, timeoutMs: 20_000, maxOutputBytes: 4096, ...extra });

/** Each command writes its own start and end time (ns, from `date`) to the log: the commands' own view. */
const timed = (log: string, name: string) => `echo "${name} start $(date +%s%N)" >> ${log}; sleep 0.6; echo "${name} end $(date +%s%N)" >> ${log}`;

function intervals(log: string): Map<string, { start: bigint; end: bigint }> {
  const out = new Map<string, { start: bigint; end: bigint }>();
  for (const line of readFileSync(log, 'utf8').trim().split('\n')) {
    const [name, kind, at] = line.split(' ');
    const entry = out.get(name) ?? { start: 0n, end: 0n };
    entry[kind as 'start' | 'end'] = BigInt(at);
    out.set(name, entry);
  }
  return out;
}

const overlap = (a: { start: bigint; end: bigint }, b: { start: bigint; end: bigint }) => a.start < b.end && b.start < a.end;

test('with one slot, two concurrent commands never overlap; the waiting one heartbeats while it waits', async (t) => {
  const slots = new CommandSlots(1);
  const log = path.join(root, 'one-slot.log');
  const ticks: string[] = [];
  const [a, b] = await Promise.all([
    run(timed(log, 'a'), { slots, tickMs: 50, onTick: () => ticks.push(`a:${slots.waiting}`) }),
    run(timed(log, 'b'), { slots, tickMs: 50, onTick: () => ticks.push(`b:${slots.waiting}`) }),
  ]);
  t.is(a.exitCode, 0);
  t.is(b.exitCode, 0);
  const runs = intervals(log);
  t.is(runs.size, 2);
  t.false(
    overlap(runs.get('a')!, runs.get('b')!),
    JSON.stringify([...runs], (_, v) => (typeof v === 'bigint' ? String(v) : v)),
  );
  // b waited for a's slot (a's run is about 0.6 s): it heartbeat while a waiter was queued.
  t.true(
    ticks.some((x) => x === 'b:1'),
    ticks.join(' '),
  );
  t.is(slots.running, 0);
});

test('with two slots the same commands do overlap (the overlap check can fail)', async (t) => {
  const slots = new CommandSlots(2);
  const log = path.join(root, 'two-slots.log');
  await Promise.all([run(timed(log, 'a'), { slots }), run(timed(log, 'b'), { slots })]);
  const runs = intervals(log);
  t.true(overlap(runs.get('a')!, runs.get('b')!));
});

test('a call cancelled while it waits for a slot gives up its wait and runs nothing', async (t) => {
  const slots = new CommandSlots(1);
  const file = path.join(root, 'never');
  const first = run('sleep 0.8', { slots });
  const controller = new AbortController();
  const second = run(`touch ${file}`, { slots, signal: controller.signal });
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.is(slots.waiting, 1);
  controller.abort();
  const r = await second;
  t.true(r.cancelled);
  t.true(r.notStarted);
  t.is(r.pgid, null);
  t.is(slots.waiting, 0);
  t.is((await first).exitCode, 0);
  t.throws(() => readFileSync(file));
  t.is(slots.running, 0);
});

test('slots are granted in arrival order and a release frees exactly one', async (t) => {
  const slots = new CommandSlots(1);
  const order: number[] = [];
  const first = await slots.acquire();
  const waiting = [1, 2, 3].map((n) => slots.acquire().then((release) => (order.push(n), release)));
  t.is(slots.waiting, 3);
  first!();
  first!(); // a second release is harmless: still only one slot
  const r1 = await waiting[0];
  t.is(slots.running, 1);
  r1!();
  (await waiting[1])!();
  (await waiting[2])!();
  t.deepEqual(order, [1, 2, 3]);
  t.is(slots.running, 0);
  t.throws(() => new CommandSlots(0));
});

test('ORCHARD_MAX_COMMANDS: 4 when unset, a positive integer otherwise, anything else stops the worker', (t) => {
  t.is(maxCommandsFromEnv(undefined), 4);
  t.is(maxCommandsFromEnv(''), 4);
  t.is(maxCommandsFromEnv('1'), 1);
  t.is(workerConfigFromEnv({ ORCHARD_MAX_COMMANDS: '9' }, root).maxConcurrentCommands, 9);
  for (const bad of ['0', '-2', '1.5', 'four']) t.throws(() => maxCommandsFromEnv(bad), { message: /ORCHARD_MAX_COMMANDS/ });
});
