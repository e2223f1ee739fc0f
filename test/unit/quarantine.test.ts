import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { deflateSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { migrateQuarantine } from '../../activities/git/quarantine';
import { GIT_TEST_ENV, gitIn as git } from '../helpers/git';

/**
 * The quarantine's move into the shared object store (issue 19), on real repositories: what moves, what is checked
 * first, and that a repeat changes nothing.
 */
function repo() {
  const dir = mkdtempSync(path.join(tmpdir(), 'orchard-quarantine-'));
  git(dir, 'init', '-q', '-b', 'main');
  writeFileSync(path.join(dir, 'a.txt'), 'a\n');
  git(dir, 'add', 'a.txt');
  git(dir, 'commit', '-q', '-m', 'a');
  const quarantine = path.join(dir, '..', `${path.basename(dir)}-q`);
  mkdirSync(quarantine);
  return { dir, shared: path.join(dir, '.git', 'objects'), quarantine };
}

/** Writes `content` as a blob into the quarantine (git hash-object with the quarantine as object directory). */
function quarantinedBlob(r: ReturnType<typeof repo>, content: string): string {
  const file = path.join(r.quarantine, '..', `blob-${Math.random()}`);
  writeFileSync(file, content);
  return execFileSync('git', ['hash-object', '-w', file], {
    cwd: r.dir,
    env: { ...GIT_TEST_ENV, GIT_OBJECT_DIRECTORY: r.quarantine, GIT_ALTERNATE_OBJECT_DIRECTORIES: r.shared },
    encoding: 'utf8',
  }).trim();
}

const readable = (r: ReturnType<typeof repo>, oid: string) => spawnSync('git', ['cat-file', '-e', oid], { cwd: r.dir, env: GIT_TEST_ENV }).status === 0;

test('loose objects move into the shared store; a repeat moves nothing and changes nothing', async (t) => {
  const r = repo();
  const oid = quarantinedBlob(r, 'new work\n');
  t.false(readable(r, oid));
  t.deepEqual(await migrateQuarantine(r.quarantine, r.shared), { moved: 1, present: 0, rejected: [] });
  t.true(readable(r, oid));
  t.false(existsSync(path.join(r.quarantine, oid.slice(0, 2), oid.slice(2))));
  t.deepEqual(await migrateQuarantine(r.quarantine, r.shared), { moved: 0, present: 0, rejected: [] });
});

test('an object the shared store already has is dropped from the quarantine, never overwritten', async (t) => {
  const r = repo();
  const oid = git(r.dir, 'rev-parse', 'HEAD:a.txt');
  t.is(quarantinedBlob(r, 'a\n'), oid);
  // hash-object -w skips objects an alternate has: plant the quarantine copy by hand, as a crash mid-move leaves it.
  mkdirSync(path.join(r.quarantine, oid.slice(0, 2)), { recursive: true });
  writeFileSync(path.join(r.quarantine, oid.slice(0, 2), oid.slice(2)), deflateSync(Buffer.from('blob 2\0a\n')));
  t.deepEqual(await migrateQuarantine(r.quarantine, r.shared), { moved: 0, present: 1, rejected: [] });
  t.is(git(r.dir, 'cat-file', '-p', oid), 'a');
});

test('a file whose content does not hash to its name stays in the quarantine: a planted "future" object cannot corrupt the store', async (t) => {
  const r = repo();
  // The name of an object main will write later, with other content behind it.
  const future = 'blob 7\0future\n';
  const name = createHash('sha1').update(future).digest('hex');
  mkdirSync(path.join(r.quarantine, name.slice(0, 2)), { recursive: true });
  writeFileSync(path.join(r.quarantine, name.slice(0, 2), name.slice(2)), deflateSync(Buffer.from('blob 7\0garbage')));
  const m = await migrateQuarantine(r.quarantine, r.shared);
  t.deepEqual(m.rejected, [path.join(name.slice(0, 2), name.slice(2))]);
  t.false(readable(r, name));
  // main writes the real object later, and it is intact.
  writeFileSync(path.join(r.dir, 'f.txt'), 'future\n');
  t.is(git(r.dir, 'hash-object', '-w', 'f.txt'), name);
  t.is(git(r.dir, 'cat-file', '-p', name), 'future');
});

test('a pack moves (pack, then index) when git verifies it; a corrupt pack stays', async (t) => {
  const r = repo();
  const oids = [quarantinedBlob(r, 'one\n'), quarantinedBlob(r, 'two\n')];
  // Pack the quarantine's loose objects into a pack of its own, as `git repack` inside the sandbox would.
  const env = { ...GIT_TEST_ENV, GIT_OBJECT_DIRECTORY: r.quarantine, GIT_ALTERNATE_OBJECT_DIRECTORIES: r.shared };
  mkdirSync(path.join(r.quarantine, 'pack'), { recursive: true });
  execFileSync('git', ['pack-objects', '-q', path.join(r.quarantine, 'pack', 'pack')], { cwd: r.dir, env, input: `${oids.join('\n')}\n` });
  execFileSync('git', ['prune-packed', '-q'], { cwd: r.dir, env });
  const m = await migrateQuarantine(r.quarantine, r.shared);
  t.deepEqual(m, { moved: 1, present: 0, rejected: [] });
  for (const oid of oids) t.true(readable(r, oid));
  t.deepEqual(readdirSync(path.join(r.quarantine, 'pack')), []);

  // A pack whose bytes were changed after indexing.
  const bad = quarantinedBlob(r, 'three\n');
  execFileSync('git', ['pack-objects', '-q', path.join(r.quarantine, 'pack', 'pack')], { cwd: r.dir, env, input: `${bad}\n` });
  const pack = readdirSync(path.join(r.quarantine, 'pack')).find((n) => n.endsWith('.pack'))!;
  const bytes = readFileSync(path.join(r.quarantine, 'pack', pack));
  bytes[20] ^= 0xff;
  writeFileSync(path.join(r.quarantine, 'pack', pack), bytes);
  const m2 = await migrateQuarantine(r.quarantine, r.shared);
  t.deepEqual(m2.rejected, [path.join('pack', pack)]);
  t.false(existsSync(path.join(r.shared, 'pack', pack)));
});

test('only objects move: alternates, temporary files and other names in the quarantine are left where they are', async (t) => {
  const r = repo();
  mkdirSync(path.join(r.quarantine, 'info'), { recursive: true });
  writeFileSync(path.join(r.quarantine, 'info', 'alternates'), '/elsewhere/objects\n');
  mkdirSync(path.join(r.quarantine, 'ab'), { recursive: true });
  writeFileSync(path.join(r.quarantine, 'ab', 'tmp_obj_123'), 'partial');
  writeFileSync(path.join(r.quarantine, 'commit-graph'), 'graph');
  t.deepEqual(await migrateQuarantine(r.quarantine, r.shared), { moved: 0, present: 0, rejected: [] });
  t.false(existsSync(path.join(r.shared, 'info', 'alternates')));
  t.false(existsSync(path.join(r.shared, 'ab', 'tmp_obj_123')));
  t.false(existsSync(path.join(r.shared, 'commit-graph')));
});
