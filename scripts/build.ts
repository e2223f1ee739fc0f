import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { build, type OutputFile } from 'esbuild';

/**
 * `npm run build` (also `prepare`, so `npm install`/`npm ci` run it, and `npm test` before ava): compiles the
 * code bin/orchard runs to CommonJS under `dist/`, one file per source file, so `dist/` mirrors the tree and
 * every `__dirname` and relative `require.resolve` means what it means in the sources. esbuild only transpiles
 * (well under a second, no incremental state to go stale); `tsc --noEmit` checks the types, with
 * `isolatedModules` on so it rejects anything a per-file transpile would get wrong. Packages in node_modules
 * are required at run time, never inlined (the Temporal SDK has native parts). Files other than TypeScript
 * (the SQL migrations) are copied beside the compiled code that reads them.
 */
export const SOURCE_DIRS = ['contract', 'client', 'activities', 'workflows', 'worker', 'cli', 'demos'] as const;
export const DIST_DIR = 'dist';

export interface BuildReport {
  readonly outDir: string;
  readonly compiled: number;
  readonly copied: number;
  /** Files written this time: those whose content changed (an unchanged file keeps its mtime). */
  readonly written: number;
  /** Files left in dist/ from sources that no longer exist, removed. */
  readonly removed: number;
  readonly ms: number;
}

/** The build failed; `message` has esbuild's errors (file, line, what). */
export class BuildError extends Error {
  readonly code = 'build_failed';
  constructor(message: string) {
    super(message);
    this.name = 'BuildError';
  }
}

/** Every file under `dir`, as absolute paths. */
function filesUnder(dir: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((name) => path.join(dir, name))
    .filter((file) => fs.statSync(file, { throwIfNoEntry: false })?.isFile() === true);
}

/**
 * Writes through a temporary file and a rename, and only when the content differs: a CLI started by another
 * build's test run (runs may overlap) never reads a half-written module.
 */
function writeIfChanged(file: string, contents: Uint8Array): boolean {
  const current = fs.existsSync(file) ? fs.readFileSync(file) : undefined;
  if (current?.equals(contents)) return false;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${randomUUID()}.tmp`;
  fs.writeFileSync(tmp, contents);
  fs.renameSync(tmp, file);
  return true;
}

const TMP_FILE = /\.[0-9a-f-]{36}\.tmp$/;

export async function buildCli(root = path.resolve(__dirname, '..')): Promise<BuildReport> {
  const started = Date.now();
  const outDir = path.join(root, DIST_DIR);
  const files = SOURCE_DIRS.flatMap((dir) => filesUnder(path.join(root, dir))).sort();
  const entryPoints = files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
  const assets = files.filter((f) => !f.endsWith('.ts'));

  let outputs: OutputFile[];
  try {
    ({ outputFiles: outputs } = await build({
      absWorkingDir: root,
      entryPoints,
      outdir: outDir,
      outbase: root,
      bundle: false,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      // As tsc does for CommonJS: `await import('./x')` becomes require(), which finds x.js. A real import() of
      // an extensionless relative path fails at run time.
      supported: { 'dynamic-import': false },
      sourcemap: 'linked',
      write: false,
      logLevel: 'silent',
    }));
  } catch (err) {
    const errors = (err as { errors?: { text: string; location?: { file: string; line: number } | null }[] }).errors;
    if (!errors) throw err;
    throw new BuildError(`esbuild failed:\n${errors.map((e) => (e.location ? `${e.location.file}:${e.location.line}: ${e.text}` : e.text)).join('\n')}`);
  }

  const wanted = new Set<string>();
  let written = 0;
  for (const out of outputs) {
    wanted.add(out.path);
    if (writeIfChanged(out.path, out.contents)) written++;
  }
  for (const asset of assets) {
    const target = path.join(outDir, path.relative(root, asset));
    wanted.add(target);
    if (writeIfChanged(target, fs.readFileSync(asset))) written++;
  }

  let removed = 0;
  for (const file of filesUnder(outDir)) {
    // Another build's temporary file is its own to rename.
    if (wanted.has(file) || TMP_FILE.test(file)) continue;
    fs.rmSync(file);
    removed++;
  }

  return { outDir, compiled: entryPoints.length, copied: assets.length, written, removed, ms: Date.now() - started };
}

export function describeBuild(report: BuildReport, root: string): string {
  return (
    `built ${path.relative(root, report.outDir)}/: ${report.compiled} modules, ${report.copied} other files ` +
    `(${report.written} written, ${report.removed} stale removed) in ${report.ms} ms`
  );
}

if (require.main === module) {
  const root = path.resolve(__dirname, '..');
  buildCli(root).then(
    (report) => console.log(`[build] ${describeBuild(report, root)}`),
    (err: unknown) => {
      console.error(`[build] ${err instanceof BuildError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      process.exit(1);
    },
  );
}
