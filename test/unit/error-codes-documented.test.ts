import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { ERROR_CODES } from '../../contract/errors';

/**
 * The error codes the contract defines, the ones docs/contract.md lists, and the ones the tests see agree: every
 * defined code is documented and the other way round; every documented code is produced by some test; and every code
 * a test reads from the CLI (`orchard: <code>:` or `{"error":{"code"}}`) is documented somewhere in the docs.
 */
const ROOT = join(__dirname, '../..');
const SELF = __filename;

function files(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name), ext) : e.name.endsWith(ext) ? [join(dir, e.name)] : [],
  );
}

/** The codes in the error table of docs/contract.md: every backticked identifier in the rows after `| group | codes |`. */
function documentedCodes(): string[] {
  const text = readFileSync(join(ROOT, 'docs/contract.md'), 'utf8');
  const start = text.indexOf('| group | codes |');
  if (start < 0) throw new Error('docs/contract.md has no `| group | codes |` table');
  const rows = text.slice(start).split('\n\n')[0].split('\n').slice(2);
  return rows.flatMap((row) => [...row.split('|')[2].matchAll(/`([a-z_]+)`/g)].map((m) => m[1]));
}

const testText = files(join(ROOT, 'test'), '.ts')
  .filter((f) => f !== SELF && !f.endsWith('.js'))
  .map((f) => readFileSync(f, 'utf8'))
  .join('\n');

test('docs/contract.md lists exactly the codes contract/errors.ts defines, each once', (t) => {
  const documented = documentedCodes();
  t.deepEqual([...documented].sort(), [...new Set(documented)].sort(), 'a code listed twice');
  t.deepEqual(
    ERROR_CODES.filter((c) => !documented.includes(c)),
    [],
    'defined but not documented',
  );
  t.deepEqual(
    documented.filter((c) => !(ERROR_CODES as readonly string[]).includes(c)),
    [],
    'documented but not defined',
  );
});

test('every documented code is produced by a test (named in one: as an expected code, message or regex)', (t) => {
  const unseen = documentedCodes().filter((code) => !new RegExp(`\\b${code}\\b`).test(testText));
  t.deepEqual(unseen, []);
});

test('every code a test reads from the CLI is documented', (t) => {
  const docs = [join(ROOT, 'README.md'), ...files(join(ROOT, 'docs'), '.md')].map((f) => readFileSync(f, 'utf8')).join('\n');
  const seen = new Set<string>();
  for (const pattern of [/orchard: ([a-z_]+):/g, /error: \{ code: '([a-z_]+)'/g, /error\.code, '([a-z_]+)'/g]) {
    for (const m of testText.matchAll(pattern)) seen.add(m[1]);
  }
  t.true(seen.size > 20, `found only ${seen.size} codes in the tests: has the pattern changed?`);
  t.deepEqual([...seen].filter((code) => !docs.includes(`\`${code}\``) && !docs.includes(`orchard: ${code}:`)).sort(), []);
});
