import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OpenAICompatibleProvider } from '../activities/model/openai';
import { makeFixtureRepo } from '../demos/fixture';
import { loadDevConfig, type DevConfig } from '../worker/dev-server';
import { PROJECT_ROOT, startOrchard, type RunningOrchard } from '../worker/runtime';
import { bootStack } from '../worker/stack';
import { stubModel, type ModelStub, type Reply } from '../test/helpers/model-stub';
import { knob } from './report';

export interface BenchStack {
  readonly orchard: RunningOrchard;
  readonly stub: ModelStub;
  /** The worker's state directory (worktrees, fixture repositories); removed by `stop`. */
  readonly dir: string;
  /** A repository with one commit, for sessions and teams. */
  readonly repo: string;
  /** What a CLI process needs in its environment to reach this stack (and only it). */
  readonly cliEnv: Record<string, string>;
  /**
   * Runs `close` (cancel what was started, so no activity outlives the worker; waited for at most `closeBoundMs`), then
   * stops everything.
   */
  stop(close?: () => Promise<unknown>, closeBoundMs?: number): Promise<void>;
}

export interface BenchStackOptions {
  /** How long the worker waits for one model answer. */
  readonly modelTimeoutMs?: number;
  /** How long running activities get when the worker stops (ORCHARD_SHUTDOWN_GRACE_SECONDS). */
  readonly shutdownGraceSeconds?: number;
  /** More worker settings, read from the environment when it starts (ORCHARD_MAX_COMMANDS, say). */
  readonly env?: Record<string, string>;
  readonly log?: (line: string) => void;
}

const STOP_BOUND_MS = 30_000;

/**
 * A stack of its own for one section: a dev server on a free port, in memory, without UI (never a running
 * `orchard dev`'s, never another bench's), with temporal-dev.yaml's dynamic config (BENCH_TRANSFER_POLL_RPS over it);
 * the database of DATABASE_URL or an in-memory PGlite; a worker pair started by `startOrchard` (as `orchard dev` runs
 * it) whose state (worktrees) is in a temporary directory, with a host id of its own and a short shutdown grace; and
 * `model` served as an OpenAI-compatible endpoint (test/helpers/model-stub.ts, a real HTTP server). The SDK's warnings
 * of the teardown stay out of the table unless ORCHARD_LOG_LEVEL says otherwise.
 */
export async function startBenchStack(model: (body: any) => Reply | Promise<Reply>, options: BenchStackOptions = {}): Promise<BenchStack> {
  const log = options.log ?? (() => undefined);
  const dir = mkdtempSync(join(tmpdir(), 'orchard-bench-stack-'));
  const teardowns: (() => unknown)[] = [];
  const stub = await stubModel({ teardown: (fn) => void teardowns.push(fn) }, model);
  // The worker reads its configuration from the environment when it starts, and only then.
  const settings: Record<string, string> = {
    ORCHARD_STATE_DIR: dir,
    ORCHARD_HOST_ID: `bench-${randomUUID().slice(0, 8)}`,
    ORCHARD_SHUTDOWN_GRACE_SECONDS: String(options.shutdownGraceSeconds ?? 2),
    ORCHARD_LOG_LEVEL: process.env.ORCHARD_LOG_LEVEL ?? 'error',
    ...options.env,
  };
  const saved = Object.fromEntries(Object.keys(settings).map((k) => [k, process.env[k]]));
  Object.assign(process.env, settings);
  let orchard: RunningOrchard;
  try {
    const stack = await bootStack({
      projectRoot: PROJECT_ROOT,
      log,
      temporal: { port: 0, ui: false, dbFile: null, dynamicConfig: dynamicConfig() },
      postgres: { dataDir: 'memory' },
    });
    // It stops the stack if it fails.
    orchard = await startOrchard(log, {
      stack,
      provider: new OpenAICompatibleProvider({ baseURL: stub.url, model: 'stub', timeoutMs: options.modelTimeoutMs ?? 30_000 }),
    });
  } catch (err) {
    for (const fn of teardowns.reverse()) await fn();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  const running = orchard;
  const { stack } = running;
  return {
    orchard: running,
    stub,
    dir,
    repo: makeFixtureRepo(dir),
    cliEnv: {
      TEMPORAL_ADDRESS: stack.temporalAddress,
      TEMPORAL_NAMESPACE: stack.namespace,
      DATABASE_URL: stack.databaseUrl,
      ORCHARD_STATE_DIR: dir,
      ORCHARD_HOST_ID: settings.ORCHARD_HOST_ID,
      ORCHARD_SHUTDOWN_GRACE_SECONDS: settings.ORCHARD_SHUTDOWN_GRACE_SECONDS,
    },
    stop: async (close, closeBoundMs = STOP_BOUND_MS) => {
      try {
        if (close) await bounded(close(), closeBoundMs, 'closing what the bench started');
        await bounded(running.stop(), STOP_BOUND_MS, 'stopping the worker');
      } finally {
        // Whatever hung above, the dev server and the database this section started do not outlive it.
        await stack.stop();
        for (const fn of teardowns.reverse()) await fn();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * temporal-dev.yaml's dynamic config, and with BENCH_TRANSFER_POLL_RPS the server's `history.transferProcessorMaxPollRPS`
 * over it (temporal-dev.yaml sets 200; the server's default, 20, lets a shard read its transfer queue at most every 50 ms,
 * and every activity and every workflow task that is not an update's waits for such a read; the dev server has one shard).
 */
function dynamicConfig(): DevConfig['dynamicConfig'] {
  const rps = knob('TRANSFER_POLL_RPS', 0);
  return { ...loadDevConfig(PROJECT_ROOT).dynamicConfig, ...(rps > 0 ? { 'history.transferProcessorMaxPollRPS': rps } : {}) };
}

/** Waits for `work` at most `ms`; past that it says so and goes on (the section's figures are already recorded). */
async function bounded(work: Promise<unknown>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), ms)));
  const outcome = await Promise.race([work.then(() => 'done' as const), late]);
  clearTimeout(timer);
  if (outcome === 'late') console.warn(`bench: ${what} took over ${ms / 1000} s; going on without it`);
}
