import { posix } from 'node:path';
import { globToRegExp, type Word } from './words';

/**
 * Where a command runs, as far as the text tells: a known directory, somewhere inside the worktree, or unknown.
 * Resolution is lexical: symlinks inside the worktree that point outside it are not seen (a known gap; the
 * reference-transaction backstop covers ref moves).
 */
export type Cwd = { readonly kind: 'known'; readonly path: string } | { readonly kind: 'inside' } | { readonly kind: 'unknown'; readonly why: string };

export function normalizeWorktree(worktree: string): string {
  if (!posix.isAbsolute(worktree)) throw new TypeError(`guard context: worktree must be an absolute path, got ${JSON.stringify(worktree)}`);
  return posix.normalize(worktree).replace(/(.)\/+$/, '$1');
}

export function isInside(path: string, worktree: string): boolean {
  return path === worktree || path.startsWith(worktree === '/' ? '/' : worktree + '/');
}

/** Resolves a literal path against `cwd`; 'inside' when it stays under the worktree without a known base. */
export function resolvePath(cwd: Cwd, path: string, worktree: string): Cwd {
  if (posix.isAbsolute(path)) return { kind: 'known', path: posix.normalize(path).replace(/(.)\/+$/, '$1') };
  if (cwd.kind === 'known') return { kind: 'known', path: posix.resolve(cwd.path, path) };
  if (cwd.kind === 'inside') {
    const up = path.split('/').some((c) => c === '..');
    return up ? { kind: 'unknown', why: `\`${path}\` relative to an unknown directory` } : cwd;
  }
  return cwd;
}

export function sameCwd(a: Cwd, b: Cwd): boolean {
  return a.kind === b.kind && (a.kind !== 'known' || a.path === (b as { path: string }).path) && (a.kind !== 'unknown' || a.why === (b as { why: string }).why);
}

/** Either directory (one path failed, the other went on): the same one, somewhere inside the worktree, or unknown. */
export function joinCwd(a: Cwd, b: Cwd, worktree: string): Cwd {
  if (sameCwd(a, b)) return a;
  if (a.kind === 'unknown') return a;
  if (b.kind === 'unknown') return b;
  if (cwdInside(a, worktree) && cwdInside(b, worktree)) return { kind: 'inside' };
  return { kind: 'unknown', why: `a \`cd\` may have failed: the shell is in ${describeCwd(a)} or ${describeCwd(b)}` };
}

export function cwdInside(cwd: Cwd, worktree: string): boolean {
  return cwd.kind === 'inside' || (cwd.kind === 'known' && isInside(cwd.path, worktree));
}

export function describeCwd(cwd: Cwd): string {
  return cwd.kind === 'known' ? cwd.path : cwd.kind === 'inside' ? 'a directory inside the worktree' : `an unknown directory (${cwd.why})`;
}

const WRITABLE_DEVICES = /^\/dev\/(null|stdout|stderr|tty|fd\/[012])$|^\/proc\/self\/fd\/[012]$/;
/** Another descriptor reopened by path (`/dev/fd/3`, `/proc/self/fd/3`) or anything else under /proc: the file behind it decides. */
const REOPENED = /^\/dev\/fd\/|^\/proc\//;
const WRITABLE_ROOTS = ['/tmp', '/var/tmp'];

export type WriteVerdict =
  { readonly ok: true } | { readonly ok: false; readonly kind: 'outside' | 'metadata' | 'dynamic' | 'unsure'; readonly detail: string };

/**
 * May a command write `target`? Inside the worktree (but never into a `.git` entry), under /tmp or /var/tmp,
 * or to /dev/null-like devices. Globs are checked by their directory part and whether they could match `.git`;
 * anything computed at run time is refused.
 */
export function checkWriteTarget(word: Word, cwd: Cwd, worktree: string): WriteVerdict {
  // `>(cmd)` is a pipe into a command the walker checks on its own.
  if (word.dynamic === 'process_substitution' && word.prefix === '') return { ok: true };
  if (word.value === undefined) {
    // A static directory before the computed part can still prove the target is git metadata or outside.
    const dir = word.prefix.includes('/') ? word.prefix.slice(0, word.prefix.lastIndexOf('/') + 1) : '';
    if (dir.split('/').includes('.git')) return { ok: false, kind: 'metadata', detail: `\`${word.text}\` is inside .git` };
    const where = dir ? resolvePath(cwd, dir, worktree) : undefined;
    if (
      where?.kind === 'known' &&
      !isInside(where.path, worktree) &&
      !isInside(worktree, where.path) &&
      !WRITABLE_ROOTS.some((root) => isInside(where.path, root))
    ) {
      return { ok: false, kind: 'outside', detail: `\`${word.text}\` is under ${where.path}, outside ${worktree}` };
    }
    return { ok: false, kind: 'dynamic', detail: `write target \`${word.text}\` is computed at run time` };
  }
  const path = word.value;
  if (WRITABLE_DEVICES.test(path)) return { ok: true };
  if (REOPENED.test(path)) return { ok: false, kind: 'unsure', detail: `\`${path}\` reopens whatever file that descriptor or /proc entry names` };
  let literal = path;
  if (word.glob) {
    const components = path.split('/');
    const firstGlob = components.findIndex((c) => /[*?[]/.test(c));
    for (const c of components.slice(firstGlob)) {
      if (/[*?[]/.test(c) && c.startsWith('.') && globToRegExp(c).test('.git')) {
        return { ok: false, kind: 'metadata', detail: `\`${path}\` can match .git` };
      }
      if (!/[*?[]/.test(c) && c === '.git') return { ok: false, kind: 'metadata', detail: `\`${path}\` names .git` };
    }
    literal = components.slice(0, firstGlob).join('/') || (path.startsWith('/') ? '/' : '.');
  }
  const where = resolvePath(cwd, literal, worktree);
  if (where.kind === 'unknown') return { ok: false, kind: 'outside', detail: `\`${path}\` from ${describeCwd(cwd)}` };
  if (where.kind === 'inside') {
    if (path.split('/').includes('.git')) return { ok: false, kind: 'metadata', detail: `\`${path}\` is inside .git` };
    return { ok: true };
  }
  if (isInside(where.path, worktree)) {
    const rel = posix.relative(worktree, where.path);
    if (rel.split('/').includes('.git') || path.split('/').includes('.git')) {
      return { ok: false, kind: 'metadata', detail: `\`${path}\` is git metadata` };
    }
    return { ok: true };
  }
  if (WRITABLE_ROOTS.some((root) => isInside(where.path, root) && where.path !== root)) return { ok: true };
  return { ok: false, kind: 'outside', detail: `\`${path}\` resolves to ${where.path}, outside ${worktree}` };
}
