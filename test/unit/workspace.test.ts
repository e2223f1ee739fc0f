import test, { type ExecutionContext } from 'ava';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { readFileInWorktree, writeFileInWorktree } from '../../activities/workspace/files';
import { resolveInWorktree, WorkspaceError } from '../../activities/workspace/paths';
import { isErrorCode } from '../../contract/errors';

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

function fixture() {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-ws-'));
  created.push(base);
  const worktree = path.join(base, 'wt');
  const outside = path.join(base, 'outside');
  mkdirSync(path.join(worktree, 'src'), { recursive: true });
  mkdirSync(outside);
  writeFileSync(path.join(worktree, '.git'), 'gitdir: /somewhere/.git/worktrees/wt\n');
  writeFileSync(path.join(worktree, 'src', 'a.txt'), 'hello\n');
  writeFileSync(path.join(outside, 'secret.txt'), 'top secret\n');
  symlinkSync(outside, path.join(worktree, 'out-link'));
  symlinkSync(path.join(outside, 'secret.txt'), path.join(worktree, 'secret-link'));
  symlinkSync(path.join(outside, 'missing.txt'), path.join(worktree, 'dangling'));
  symlinkSync('src/a.txt', path.join(worktree, 'inner-link'));
  return { base, worktree, outside };
}

async function refusedWith(t: ExecutionContext, p: Promise<unknown>, code: WorkspaceError['code']) {
  const err = await t.throwsAsync(p);
  t.true(err instanceof WorkspaceError, String(err));
  t.is((err as WorkspaceError).code, code, err?.message);
  t.true(isErrorCode((err as WorkspaceError).code));
}

test('relative and absolute paths inside the worktree resolve', async (t) => {
  const { worktree } = fixture();
  t.is(await resolveInWorktree(worktree, 'src/a.txt'), path.join(worktree, 'src', 'a.txt'));
  t.is(await resolveInWorktree(worktree, './src/../src/a.txt'), path.join(worktree, 'src', 'a.txt'));
  t.is(await resolveInWorktree(worktree, path.join(worktree, 'src/new/b.txt')), path.join(worktree, 'src/new/b.txt'));
  t.is(await resolveInWorktree(worktree, 'inner-link'), path.join(worktree, 'src', 'a.txt'));
});

test('.. escapes are refused', async (t) => {
  const { worktree } = fixture();
  await refusedWith(t, resolveInWorktree(worktree, '../outside/secret.txt'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'src/../../outside'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, '..'), 'path_outside_worktree');
});

test('absolute paths outside the worktree are refused', async (t) => {
  const { worktree, outside } = fixture();
  await refusedWith(t, resolveInWorktree(worktree, '/etc/passwd'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, path.join(outside, 'secret.txt')), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, `${worktree}-sibling/x`), 'path_outside_worktree');
});

test('symlinks leading outside are refused, at any depth and for new files below them', async (t) => {
  const { worktree } = fixture();
  await refusedWith(t, resolveInWorktree(worktree, 'secret-link'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'out-link/secret.txt'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'out-link/new/deeper.txt'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'dangling'), 'path_outside_worktree');
  await refusedWith(t, readFileInWorktree(worktree, 'secret-link', { maxBytes: 100 }), 'path_outside_worktree');
  await refusedWith(t, writeFileInWorktree(worktree, 'out-link/planted.txt', 'x'), 'path_outside_worktree');
  await refusedWith(t, writeFileInWorktree(worktree, 'dangling', 'x'), 'path_outside_worktree');
});

test('.git (file or directory, at any depth) is refused', async (t) => {
  const { worktree } = fixture();
  await refusedWith(t, resolveInWorktree(worktree, '.git'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, '.git/HEAD'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'src/../.git'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, 'vendor/lib/.git/config'), 'path_outside_worktree');
  await refusedWith(t, resolveInWorktree(worktree, path.join(worktree, '.GIT')), 'path_outside_worktree');
  symlinkSync('.git', path.join(worktree, 'git-link'));
  await refusedWith(t, resolveInWorktree(worktree, 'git-link'), 'path_outside_worktree');
  await refusedWith(t, writeFileInWorktree(worktree, '.git', 'gitdir: ../../main/.git'), 'path_outside_worktree');
});

test('NUL bytes and empty paths are invalid arguments', async (t) => {
  const { worktree } = fixture();
  await refusedWith(t, resolveInWorktree(worktree, 'src/a.txt\0.png'), 'tool_args_invalid');
  await refusedWith(t, resolveInWorktree(worktree, ''), 'tool_args_invalid');
});

test('write then read round-trips, creating parent directories, atomically', async (t) => {
  const { worktree } = fixture();
  const content = 'first line\nsecond — ünïcödé ✓\n';
  const written = await writeFileInWorktree(worktree, 'new/dir/file.txt', content);
  t.deepEqual(written, { path: 'new/dir/file.txt', bytes: Buffer.byteLength(content), created: true });
  t.is(await readFileInWorktree(worktree, 'new/dir/file.txt', { maxBytes: 1000 }), content);
  const replaced = await writeFileInWorktree(worktree, 'new/dir/file.txt', 'v2\n');
  t.false(replaced.created);
  t.is(readFileSync(path.join(worktree, 'new/dir/file.txt'), 'utf8'), 'v2\n');
  // No temporary files are left behind.
  t.deepEqual(readdirSync(path.join(worktree, 'new/dir')), ['file.txt']);
});

test('replacing a file keeps its permission bits', async (t) => {
  const { worktree } = fixture();
  const script = path.join(worktree, 'run.sh');
  writeFileSync(script, '#!/bin/sh\n');
  chmodSync(script, 0o755);
  await writeFileInWorktree(worktree, 'run.sh', '#!/bin/sh\necho hi\n');
  t.is(statSync(script).mode & 0o777, 0o755);
});

test('writing through a symlink inside the worktree writes its target', async (t) => {
  const { worktree } = fixture();
  await writeFileInWorktree(worktree, 'inner-link', 'changed\n');
  t.is(readFileSync(path.join(worktree, 'src/a.txt'), 'utf8'), 'changed\n');
});

test('a long file is truncated with a marker and only the head is read', async (t) => {
  const { worktree } = fixture();
  const body = Array.from({ length: 5000 }, (_, i) => `row ${i}\n`).join('');
  writeFileSync(path.join(worktree, 'big.txt'), body);
  const text = await readFileInWorktree(worktree, 'big.txt', { maxBytes: 200 });
  t.true(text.startsWith('row 0\nrow 1\n'));
  t.true(body.startsWith(text.slice(0, text.indexOf('[…'))));
  const marker = /\[… (\d+) more bytes not shown: the file has (\d+) bytes/.exec(text);
  t.truthy(marker);
  t.is(Number(marker?.[2]), Buffer.byteLength(body));
  t.is(Number(marker?.[1]), Buffer.byteLength(body) - 200);
});

test('truncation does not split a multi-byte character', async (t) => {
  const { worktree } = fixture();
  writeFileSync(path.join(worktree, 'u.txt'), 'é'.repeat(100));
  const text = await readFileInWorktree(worktree, 'u.txt', { maxBytes: 11 });
  t.true(text.startsWith('ééééé\n[… 190 more bytes'));
});

test('directories, missing files and binary files are clear errors', async (t) => {
  const { worktree } = fixture();
  writeFileSync(path.join(worktree, 'bin.dat'), Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0x00, 0x01, 0x02]));
  writeFileSync(path.join(worktree, 'latin1.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
  await refusedWith(t, readFileInWorktree(worktree, 'src', { maxBytes: 100 }), 'file_is_directory');
  await refusedWith(t, readFileInWorktree(worktree, 'nope.txt', { maxBytes: 100 }), 'file_not_found');
  await refusedWith(t, readFileInWorktree(worktree, 'src/a.txt/x', { maxBytes: 100 }), 'file_not_found');
  await refusedWith(t, readFileInWorktree(worktree, 'bin.dat', { maxBytes: 100 }), 'file_not_text');
  await refusedWith(t, readFileInWorktree(worktree, 'latin1.txt', { maxBytes: 100 }), 'file_not_text');
  await refusedWith(t, writeFileInWorktree(worktree, 'src', 'x'), 'file_is_directory');
  await refusedWith(t, writeFileInWorktree(worktree, 'src/a.txt/child.txt', 'x'), 'tool_args_invalid');
  t.is(await readFileInWorktree(worktree, 'src/a.txt', { maxBytes: 100 }), 'hello\n');
});
