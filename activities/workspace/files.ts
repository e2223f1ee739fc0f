import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { utf8SafeEnd } from '../bash/runner';
import { isInsideDir, resolveWorktreePath, WorkspaceError } from './paths';

/** git's own heuristic: a NUL byte in the first 8000 bytes means binary. */
const BINARY_SNIFF_BYTES = 8000;

function fileError(err: unknown, shown: string): never {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') {
    throw new WorkspaceError('file_not_found', `${shown} does not exist in your worktree`);
  }
  if (code === 'EISDIR') throw new WorkspaceError('file_is_directory', `${shown} is a directory`);
  throw err;
}

/**
 * Reads a UTF-8 text file from the worktree. At most `maxBytes` are read (never the whole of a large file);
 * when the file is longer the text ends with a marker saying how much was left out and how to read the rest.
 * Directories, missing files, non-regular files (a FIFO would block) and binary files are typed errors.
 */
export async function readFileInWorktree(worktree: string, relPath: string, options: { maxBytes: number }): Promise<string> {
  const { absolute, relative } = await resolveWorktreePath(worktree, relPath);
  const shown = JSON.stringify(relative || '.');
  const stat = await fs.stat(absolute).catch((err: unknown) => fileError(err, shown));
  if (stat.isDirectory()) {
    throw new WorkspaceError('file_is_directory', `${shown} is a directory; list it with bash (ls ${shown})`);
  }
  if (!stat.isFile()) throw new WorkspaceError('file_not_text', `${shown} is not a regular file`);

  const maxBytes = Math.max(0, Math.floor(options.maxBytes));
  const handle = await fs.open(absolute, 'r').catch((err: unknown) => fileError(err, shown));
  let buf: Buffer;
  let size: number;
  try {
    size = (await handle.stat()).size;
    // One byte more than we keep tells us whether the file goes on (its size may change while we read);
    // at least the sniff window, so a small maxBytes does not hide a binary file.
    const want = Math.max(maxBytes + 1, BINARY_SNIFF_BYTES);
    buf = Buffer.alloc(want);
    let filled = 0;
    while (filled < want) {
      const { bytesRead } = await handle.read(buf, filled, want - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    buf = buf.subarray(0, filled);
  } finally {
    await handle.close();
  }

  if (buf.subarray(0, BINARY_SNIFF_BYTES).includes(0)) {
    throw new WorkspaceError('file_not_text', `${shown} looks binary (it contains NUL bytes); inspect it with bash`);
  }
  const truncated = buf.length > maxBytes;
  const kept = truncated ? buf.subarray(0, utf8SafeEnd(buf.subarray(0, maxBytes))) : buf;
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(kept);
  } catch {
    throw new WorkspaceError('file_not_text', `${shown} is not valid UTF-8 text; inspect it with bash`);
  }
  if (!truncated) return text;
  const total = Math.max(size, buf.length);
  const sep = text === '' || text.endsWith('\n') ? '' : '\n';
  return (
    `${text}${sep}[… ${total - kept.length} more bytes not shown: the file has ${total} bytes; ` +
    `read further with bash, e.g. tail -c +${kept.length + 1} ${shown} | head -c ${maxBytes}]\n`
  );
}

export interface WriteFileResult {
  /** Path relative to the worktree root. */
  path: string;
  bytes: number;
  /** false when an existing file was replaced. */
  created: boolean;
}

/**
 * Creates or replaces a file in the worktree, creating parent directories. The content goes to a temporary
 * file in the same directory which is then renamed over the target, so a reader (or a crash) never sees a
 * half-written file. An existing file keeps its permission bits (an executable script stays executable).
 */
export async function writeFileInWorktree(worktree: string, relPath: string, content: string): Promise<WriteFileResult> {
  if (typeof content !== 'string') throw new WorkspaceError('tool_args_invalid', 'content must be a string');
  const { absolute, relative, root } = await resolveWorktreePath(worktree, relPath);
  const shown = JSON.stringify(relative || '.');
  if (relative === '') throw new WorkspaceError('file_is_directory', 'the worktree root is a directory');
  const dir = path.dirname(absolute);
  try {
    await fs.mkdir(dir, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new WorkspaceError('tool_args_invalid', `cannot create ${shown}: a parent of it is a file`);
    }
    throw err;
  }
  // Re-resolve after mkdir: the directory we write into must still be the one we checked.
  const realDir = await fs.realpath(dir);
  if (!isInsideDir(root, realDir)) {
    throw new WorkspaceError('path_outside_worktree', `${shown} leads outside the worktree`);
  }

  let mode: number | undefined;
  try {
    const existing = await fs.lstat(absolute);
    if (existing.isDirectory()) throw new WorkspaceError('file_is_directory', `${shown} is a directory`);
    if (!existing.isFile()) throw new WorkspaceError('tool_args_invalid', `${shown} exists and is not a regular file`);
    mode = existing.mode & 0o7777;
  } catch (err) {
    if (err instanceof WorkspaceError) throw err;
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }

  const suffix = `${process.pid}-${randomBytes(4).toString('hex')}`;
  const tmp = path.join(realDir, `.${path.basename(absolute)}.orchard-${suffix}.tmp`);
  const data = Buffer.from(content, 'utf8');
  try {
    const handle = await fs.open(tmp, 'wx', 0o666);
    try {
      await handle.writeFile(data);
      if (mode !== undefined) await handle.chmod(mode);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(tmp, absolute);
  } catch (err) {
    await fs.rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
  return { path: relative, bytes: data.length, created: mode === undefined };
}
