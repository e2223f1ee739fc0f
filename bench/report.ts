import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { resolveTemporalCli } from '../worker/temporal-cli';

/**
 * What `npm run bench` records: each figure beside the baseline measured in the same run, the environment, and the
 * load before and after. Sections add figures; `write` prints the table and writes `bench/results.json`. Figures
 * are printed and recorded, never asserted: a regression shows as a ratio in the next run.
 */

export type Unit = 'ms' | 'µs' | 'per_s' | 'bytes' | 'MiB' | 'count' | 'ratio';

export interface Figure {
  readonly section: string;
  readonly name: string;
  readonly unit: Unit;
  /** The headline value (a p50 for a distribution). */
  readonly value: number;
  readonly p99?: number;
  readonly n?: number;
  /** The figure it is measured against, by name (same section), and value / baseline. */
  readonly baseline?: string;
  readonly ratio?: number;
  readonly note?: string;
}

export interface Environment {
  readonly cores: number;
  readonly cpu: string;
  readonly memoryGiB: number;
  readonly node: string;
  readonly temporalCli?: string;
  readonly database: string;
  readonly platform: string;
  readonly loadBefore: readonly number[];
  loadAfter?: readonly number[];
  readonly startedAt: string;
  finishedAt?: string;
  /** Every BENCH_* knob set for the run. */
  readonly knobs: Record<string, string>;
}

/** The p-th percentile of an ascending list (nearest rank). */
function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

const sortedCopy = (xs: readonly number[]): number[] => [...xs].sort((a, b) => a - b);

/** A knob: `BENCH_<name>` as a number, else the default. */
export function knob(name: string, fallback: number): number {
  const raw = process.env[`BENCH_${name}`];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) throw new Error(`BENCH_${name}=${raw}: expected a non-negative number`);
  return value;
}

/** `temporal --version` of the CLI the embedded stack runs (PATH, ORCHARD_TEMPORAL_CLI, then Orchard's cache). */
async function temporalCliVersion(): Promise<string | undefined> {
  const bin = await resolveTemporalCli(() => undefined).catch(() => undefined);
  if (bin === undefined) return undefined;
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

export class Report {
  readonly figures: Figure[] = [];
  readonly skipped: { section: string; why: string }[] = [];
  readonly environment: Environment;

  /** A report whose environment names the Temporal CLI in use. */
  static async open(): Promise<Report> {
    return new Report(await temporalCliVersion());
  }

  private constructor(temporalCli: string | undefined) {
    const knobs = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => k.startsWith('BENCH_') && v !== undefined)) as Record<string, string>;
    this.environment = {
      cores: os.cpus().length,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
      node: process.version,
      temporalCli,
      database: process.env.DATABASE_URL ? `PostgreSQL (${redact(process.env.DATABASE_URL)})` : 'embedded PGlite',
      platform: `${os.platform()} ${os.release()}`,
      loadBefore: os.loadavg().map(round2),
      startedAt: new Date().toISOString(),
      knobs,
    };
  }

  /** One figure. */
  add(figure: Figure): Figure {
    this.figures.push(figure);
    return figure;
  }

  /** A distribution: p50 as the value, p99, n. */
  samples(section: string, name: string, samples: readonly number[], unit: Unit = 'ms', extra: Partial<Figure> = {}): Figure {
    const sorted = sortedCopy(samples);
    return this.add({ section, name, unit, value: percentile(sorted, 50), p99: percentile(sorted, 99), n: sorted.length, ...extra });
  }

  /** A figure against its baseline (same section): the ratio is value / baseline value. */
  against(figure: Figure, baseline: Figure): Figure {
    const at = this.figures.indexOf(figure);
    const withRatio = { ...figure, baseline: baseline.name, ratio: round2(figure.value / baseline.value, 3) };
    if (at >= 0) this.figures[at] = withRatio;
    return withRatio;
  }

  skip(section: string, why: string): void {
    this.skipped.push({ section, why });
  }

  /** The table, as printed and as the README shows it (Markdown). */
  table(): string {
    const lines = ['| section | figure | p50 / value | p99 | n | baseline | ratio |', '|---|---|---|---|---|---|---|'];
    for (const f of this.figures) {
      lines.push(
        `| ${f.section} | ${f.name}${f.note ? ` (${f.note})` : ''} | ${show(f.value, f.unit)} | ${f.p99 === undefined ? '' : show(f.p99, f.unit)} | ${f.n ?? ''} | ${f.baseline ?? ''} | ${f.ratio === undefined ? '' : `${f.ratio}×`} |`,
      );
    }
    for (const s of this.skipped) lines.push(`| ${s.section} | not measured: ${s.why} | | | | | |`);
    return lines.join('\n');
  }

  environmentLine(): string {
    const e = this.environment;
    return (
      `${e.cores} cores (${e.cpu}), ${e.memoryGiB} GiB, Node ${e.node}, Temporal CLI ${e.temporalCli ?? 'not found'}, ${e.database}; ` +
      `load ${e.loadBefore.join(' ')} before, ${(e.loadAfter ?? []).join(' ')} after`
    );
  }

  /**
   * Closes the run: load after, `bench/results.json` (or BENCH_RESULTS), the table printed. With BENCH_PUBLISH=1 the
   * table and environment also replace the latest ones in docs/performance.md (between its bench markers).
   */
  write(file = process.env.BENCH_RESULTS ?? path.resolve(__dirname, 'results.json')): void {
    this.environment.loadAfter = os.loadavg().map(round2);
    this.environment.finishedAt = new Date().toISOString();
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, `${JSON.stringify({ environment: this.environment, figures: this.figures, skipped: this.skipped }, null, 2)}\n`);
    console.log(`\n${this.environmentLine()}\n\n${this.table()}\n\nwritten to ${path.relative(process.cwd(), file) || file}`);
    if (process.env.BENCH_PUBLISH === '1') console.log(`published to ${this.publish()}`);
  }

  /** The table in docs/performance.md, between `<!-- bench:begin -->` and `<!-- bench:end -->`. */
  private publish(doc = path.resolve(__dirname, '..', 'docs', 'performance.md')): string {
    const text = readFileSync(doc, 'utf8');
    const [begin, end] = ['<!-- bench:begin -->', '<!-- bench:end -->'];
    const from = text.indexOf(begin);
    const to = text.indexOf(end);
    if (from < 0 || to < from) throw new Error(`${doc} has no ${begin} … ${end} section for the table`);
    const e = this.environment;
    const body = [
      `Measured ${e.startedAt.slice(0, 10)} by \`npm run bench\`${
        Object.keys(e.knobs).filter((k) => k !== 'BENCH_PUBLISH').length > 0
          ? ` (${Object.entries(e.knobs)
              .filter(([k]) => k !== 'BENCH_PUBLISH')
              .map(([k, v]) => `${k}=${v}`)
              .join(', ')})`
          : ''
      }: ${this.environmentLine()}.`,
      '',
      this.table(),
    ].join('\n');
    writeFileSync(doc, `${text.slice(0, from + begin.length)}\n${body}\n${text.slice(to)}`);
    return path.relative(process.cwd(), doc) || doc;
  }
}

function round2(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

function show(x: number, unit: Unit): string {
  if (!Number.isFinite(x)) return String(x);
  switch (unit) {
    case 'ms':
      return x < 1 ? `${(x * 1000).toFixed(1)} µs` : x < 100 ? `${x.toFixed(2)} ms` : `${x.toFixed(0)} ms`;
    case 'µs':
      return `${x.toFixed(1)} µs`;
    case 'per_s':
      return `${x.toFixed(1)}/s`;
    case 'bytes':
      return x < 10_240 ? `${x.toFixed(0)} B` : `${(x / 1024).toFixed(1)} KiB`;
    case 'MiB':
      return `${x.toFixed(1)} MiB`;
    case 'ratio':
      return `${x.toFixed(3)}×`;
    default:
      return String(Math.round(x * 100) / 100);
  }
}

function redact(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    return `${u.host}${u.pathname}`;
  } catch {
    return 'DATABASE_URL';
  }
}
