import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { BuildError, buildCli, SOURCE_DIRS } from '../../scripts/build';

/**
 * A checkout in miniature: a command that lazy-loads a module with `await import()`, reads SQL beside its own
 * compiled file through `__dirname`, and imports a type-only re-export, the patterns the real CLI relies on.
 */
function fixture(): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'orchard-build-'));
  for (const dir of SOURCE_DIRS) fs.mkdirSync(path.join(root, dir));
  const write = (rel: string, text: string) => {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    fs.writeFileSync(path.join(root, rel), text);
  };
  write('package.json', '{}\n');
  write('activities/store/migrations/001_first.sql', 'SELECT 1;\n');
  write(
    'activities/store/migrate.ts',
    "import { readdirSync } from 'node:fs';\nimport { join } from 'node:path';\n" +
      "export const migrations = (): string[] => readdirSync(join(__dirname, 'migrations'));\n",
  );
  write('workflows/types.ts', 'export interface Shape { readonly name: string }\nexport const KIND = "shape";\n');
  write('worker/late.ts', "export const late = (): string => 'loaded late';\n");
  write(
    'client/main.ts',
    "import { KIND, type Shape } from '../workflows/types';\nimport { migrations } from '../activities/store/migrate';\n" +
      "async function main(): Promise<void> {\n  const { late } = await import('../worker/late');\n" +
      '  const shape: Shape = { name: KIND };\n  console.log(JSON.stringify({ late: late(), shape, migrations: migrations() }));\n}\n' +
      'void main();\n',
  );
  return root;
}

const runMain = (root: string) => JSON.parse(execFileSync(process.execPath, [path.join(root, 'dist/client/main.js')], { encoding: 'utf8' })) as unknown;

test('the build mirrors the sources under dist/: lazy imports, __dirname-relative files and type-only imports work', async (t) => {
  const root = fixture();
  const report = await buildCli(root);
  t.is(report.compiled, 4);
  t.is(report.copied, 1);
  t.true(fs.existsSync(path.join(root, 'dist/activities/store/migrations/001_first.sql')));
  t.deepEqual(runMain(root), { late: 'loaded late', shape: { name: 'shape' }, migrations: ['001_first.sql'] });
});

test('a rebuild writes only what changed and removes the output of deleted sources', async (t) => {
  const root = fixture();
  await buildCli(root);
  const compiled = path.join(root, 'dist/workflows/types.js');
  const past = new Date(Date.now() - 60_000);
  fs.utimesSync(compiled, past, past);

  const again = await buildCli(root);
  t.is(again.written, 0);
  // Untouched: the mtime set above (to the millisecond; mtimeMs is a float that may carry sub-ms noise).
  t.true(Math.abs(fs.statSync(compiled).mtimeMs - past.getTime()) < 1, `${fs.statSync(compiled).mtimeMs} vs ${past.getTime()}`);

  fs.writeFileSync(path.join(root, 'worker/late.ts'), "export const late = (): string => 'changed';\n");
  fs.rmSync(path.join(root, 'activities/store/migrations/001_first.sql'));
  const changed = await buildCli(root);
  t.is(changed.written, 2); // late.js and its map
  t.is(changed.removed, 1);
  t.deepEqual(runMain(root), { late: 'changed', shape: { name: 'shape' }, migrations: [] });
});

test('a source esbuild cannot parse fails the build with the file and line', async (t) => {
  const root = fixture();
  fs.writeFileSync(path.join(root, 'worker/broken.ts'), 'export const x = ;\n');
  const err = await t.throwsAsync(buildCli(root), { instanceOf: BuildError });
  t.is(err?.code, 'build_failed');
  t.regex(err?.message ?? '', /worker\/broken\.ts:1: /);
});
