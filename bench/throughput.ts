import { metricsRegistry } from '../activities/metrics';
import { completion } from '../test/helpers/model-stub';
import { knob, type Report } from './report';
import { startBenchStack } from './stack';

/**
 * How many `session send`s one worker sustains: sessions on the real embedded stack (Temporal dev server, the
 * database, worktrees), each driven in a closed loop through OrchardClient — send, wait until the stub model has
 * answered that task's turn, send again — with a model that answers at once, so what is measured is Orchard's own
 * path (update, store, workflow tasks, activities). Beside it, the same loop on one session alone.
 */
export async function benchThroughput(report: Report): Promise<void> {
  const seconds = knob('THROUGHPUT_SECONDS', 60);
  const sessions = knob('THROUGHPUT_SESSIONS', 50);
  if (seconds === 0 || sessions === 0) {
    report.skip('throughput', 'BENCH_THROUGHPUT_SECONDS or BENCH_THROUGHPUT_SESSIONS is 0');
    return;
  }
  // A turn's model request carries its task as the last user message: `bench-send <marker>`.
  const waiting = new Map<string, () => void>();
  const bench = await startBenchStack((body) => {
    const marker = /bench-send (\S+)/.exec(lastUserText(body))?.[1];
    if (marker) {
      waiting.get(marker)?.();
      waiting.delete(marker);
    }
    return completion({ content: 'done' });
  });
  const ids = Array.from({ length: sessions }, (_, i) => `tp-${i}`);
  try {
    const { client } = bench.orchard;
    let seq = 0;
    /** One send, timed: until the update is answered (the task queued) and until the model has answered its turn. */
    const send = async (sessionId: string): Promise<{ accepted: number; answered: number; at: number }> => {
      const marker = `${sessionId}.${++seq}`;
      const answered = new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`bench: no model call for ${marker} within 120 s`)), 120_000);
        waiting.set(marker, () => {
          clearTimeout(timer);
          resolve();
        });
      });
      // Awaited below; a send that fails first must not leave it rejecting unobserved.
      answered.catch(() => undefined);
      const t0 = performance.now();
      await client.send(sessionId, { task: `bench-send ${marker}` });
      const t1 = performance.now();
      await answered;
      const t2 = performance.now();
      return { accepted: t1 - t0, answered: t2 - t0, at: t2 };
    };
    await eachLimit(ids, 8, (sessionId) => client.createSession({ sessionId, title: `throughput ${sessionId}`, repo: bench.repo }));
    // Every session has its worktree and has run one turn before anything is timed.
    await eachLimit(ids, 8, (sessionId) => send(sessionId));
    await eachLimit(ids, 8, (sessionId) => client.waitUntilSettled(sessionId, { intervalMs: 250 }));

    // Alone: one session, the same closed loop, nothing else running.
    const alone = { accepted: [] as number[], answered: [] as number[] };
    const aloneMs = Math.min(5, seconds) * 1000;
    const aloneStart = performance.now();
    while (performance.now() - aloneStart < aloneMs) {
      const s = await send(ids[0]);
      alone.accepted.push(s.accepted);
      alone.answered.push(s.answered);
    }
    const aloneRate = alone.answered.length / ((performance.now() - aloneStart) / 1000);
    await client.waitUntilSettled(ids[0], { intervalMs: 250 });

    // Under load: every session loops until the window closes; a send counts when its answer came inside it.
    const queriesBefore = await storeQueriesBy();
    const load = { accepted: [] as number[], answered: [] as number[] };
    const start = performance.now();
    const end = start + seconds * 1000;
    await Promise.all(
      ids.map(async (sessionId) => {
        while (performance.now() < end) {
          const s = await send(sessionId);
          if (s.at > end) break;
          load.accepted.push(s.accepted);
          load.answered.push(s.answered);
        }
      }),
    );
    const byActivity = new Map<string, number>();
    for (const after of await storeQueriesBy()) {
      const before = queriesBefore.find((b) => b.origin === after.origin && b.activity === after.activity)?.value ?? 0;
      const key = after.activity === 'none' ? after.origin : after.activity;
      if (after.value > before) byActivity.set(key, (byActivity.get(key) ?? 0) + after.value - before);
    }
    const queries = [...byActivity.values()].reduce((n, v) => n + v, 0);
    const rate = load.answered.length / seconds;

    const note = 'each session sends again once the model got its last task';
    const aloneRateFigure = report.add({
      section: 'throughput',
      name: 'sends answered per second, one session alone',
      unit: 'per_s',
      value: aloneRate,
      n: alone.answered.length,
    });
    report.against(
      report.add({
        section: 'throughput',
        name: `sends answered per second, ${sessions} sessions on one worker`,
        unit: 'per_s',
        value: rate,
        n: load.answered.length,
        note: `${seconds} s, ${note}`,
      }),
      aloneRateFigure,
    );
    const acceptedNote = 'until the send update is answered: task stored and queued';
    const answeredNote = "until the model got the task's turn";
    const acceptedAlone = report.samples('throughput', 'send accepted, one session alone', alone.accepted, 'ms', { note: acceptedNote });
    report.against(report.samples('throughput', `send accepted, ${sessions} sessions`, load.accepted, 'ms', { note: acceptedNote }), acceptedAlone);
    const answeredAlone = report.samples('throughput', 'send answered, one session alone', alone.answered, 'ms', { note: answeredNote });
    report.against(report.samples('throughput', `send answered, ${sessions} sessions`, load.answered, 'ms', { note: answeredNote }), answeredAlone);
    report.add({
      section: 'throughput',
      name: 'store queries per send under load',
      unit: 'count',
      value: load.answered.length > 0 ? queries / load.answered.length : NaN,
      n: queries,
      note: 'orchard_store_queries_total in the window / sends',
    });
    const perSend = [...byActivity.entries()].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${(v / Math.max(1, load.answered.length)).toFixed(2)}`);
    console.log(`store queries per send, by activity: ${perSend.join(', ')}`);
  } finally {
    await bench.stop(() => eachLimit(ids, 8, (sessionId) => bench.orchard.client.cancel(sessionId, 'bench done').catch(() => undefined)));
  }
}

/** The worker's store statements so far, by origin and activity type (orchard_store_queries_total). */
export async function storeQueriesBy(): Promise<{ origin: string; activity: string; value: number }[]> {
  const metric = metricsRegistry.getSingleMetric('orchard_store_queries_total');
  if (!metric) throw new Error('bench: orchard_store_queries_total is not registered');
  const { values } = await metric.get();
  return values.map((v) => ({ origin: String(v.labels.origin), activity: String(v.labels.activity), value: v.value }));
}

const lastUserText = (body: any): string => String(body.messages.filter((m: any) => m.role === 'user').at(-1)?.content ?? '');

/** Runs `fn` over `items`, at most `limit` at a time. */
async function eachLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]);
      }
    }),
  );
  return out;
}
