import { runFileText } from '../bash/spawner';
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { inflateSync } from 'node:zlib';

/**
 * An isolated child's object quarantine (issue 19), the way git's receive-pack quarantines a push: inside the
 * sandbox the shared object store is read-only and git writes new objects to a directory of the child's own
 * (GIT_OBJECT_DIRECTORY), reading the shared store as its alternate. After a command has passed verification, Orchard
 * moves the new objects into the shared store from outside the sandbox (`migrateQuarantine`). A child can therefore
 * add objects, never delete, rewrite or repack one that others need; and what it adds is checked first: an object is
 * moved only when its content hashes to its name (a planted file under the name of an object someone will write
 * later would otherwise corrupt that object for everyone: git never rewrites an object it finds).
 */

/** Where a session's quarantine lives on the host: beside its worktree, like its private tmp. */
export function sessionQuarantineDir(worktree: string, sessionId: string): string {
  return path.join(path.dirname(path.resolve(worktree)), '.quarantine', sessionId);
}

export interface Migration {
  /** Objects (loose) and packs moved into the shared store. */
  readonly moved: number;
  /** Already in the shared store (a retry after a crash, or the same object written twice): dropped from the quarantine. */
  readonly present: number;
  /** Left in the quarantine: their content does not match their name, or git could not verify the pack. */
  readonly rejected: readonly string[];
}

const LOOSE_DIR = /^[0-9a-f]{2}$/;
const LOOSE_FILE = /^(?:[0-9a-f]{38}|[0-9a-f]{62})$/;
const PACK_FILE = /^pack-(?:[0-9a-f]{40}|[0-9a-f]{64})\.(pack|rev|idx)$/;

/**
 * Moves every verified object of `quarantine` into `shared` (the repository's objects dir). Idempotent, and safe to
 * repeat after a crash at any point: each file is linked (or copied, then renamed) into place before it leaves the
 * quarantine, a file the shared store already has is only dropped, and a pack becomes visible (its .idx) last.
 * Anything else in the quarantine (info/alternates, commit-graph, temporary files) is never moved.
 */
export async function migrateQuarantine(quarantine: string, shared: string): Promise<Migration> {
  let moved = 0;
  let present = 0;
  const rejected: string[] = [];
  const entries = await fs.readdir(quarantine).catch(() => [] as string[]);
  // Packs first (the .idx of each last: git sees a pack once its index exists), then loose objects.
  if (entries.includes('pack')) {
    const dir = path.join(quarantine, 'pack');
    const names = (await fs.readdir(dir)).filter((n) => PACK_FILE.test(n));
    const packs = [...new Set(names.map((n) => n.replace(/\.(pack|rev|idx)$/, '')))];
    for (const pack of packs) {
      const files = ['pack', 'rev', 'idx'].map((ext) => `${pack}.${ext}`).filter((n) => names.includes(n));
      if (!files.includes(`${pack}.pack`) || !files.includes(`${pack}.idx`)) continue; // still being written
      if (!(await packVerifies(path.join(dir, `${pack}.idx`)))) {
        rejected.push(path.join('pack', `${pack}.pack`));
        continue;
      }
      for (const name of files) {
        const outcome = await moveInto(path.join(dir, name), path.join(shared, 'pack', name));
        if (outcome === 'moved' && name.endsWith('.idx')) moved += 1;
        if (outcome === 'present' && name.endsWith('.idx')) present += 1;
      }
    }
  }
  for (const sub of entries.filter((e) => LOOSE_DIR.test(e))) {
    const dir = path.join(quarantine, sub);
    for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
      if (!LOOSE_FILE.test(name)) continue;
      const source = path.join(dir, name);
      if (!(await looseVerifies(source, sub + name))) {
        rejected.push(path.join(sub, name));
        continue;
      }
      const outcome = await moveInto(source, path.join(shared, sub, name));
      if (outcome === 'moved') moved += 1;
      else present += 1;
    }
  }
  return { moved, present, rejected };
}

/** A loose object is zlib-deflated `<type> <size>\0<content>`, named by the hash of exactly that. */
async function looseVerifies(file: string, name: string): Promise<boolean> {
  try {
    const raw = inflateSync(await fs.readFile(file));
    const nul = raw.indexOf(0);
    const header = /^(blob|tree|commit|tag) (\d+)$/.exec(raw.subarray(0, nul).toString('latin1'));
    if (nul < 0 || !header || Number(header[2]) !== raw.length - nul - 1) return false;
    return (
      createHash(name.length === 64 ? 'sha256' : 'sha1')
        .update(raw)
        .digest('hex') === name
    );
  } catch {
    return false;
  }
}

/** `git verify-pack` hashes every object of the pack and checks the pack's and the index's checksums. */
async function packVerifies(idx: string): Promise<boolean> {
  const format = path.basename(idx).length === 'pack-.idx'.length + 64 ? 'sha256' : 'sha1';
  try {
    await runFileText('git', ['verify-pack', `--object-format=${format}`, idx], {
      env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' },
      maxBuffer: 64 * 1024 * 1024,
    });
    return true;
  } catch {
    return false;
  }
}

/**
 * Puts `source` at `target` unless a file is there already, then removes `source`. Never overwrites: the shared
 * store's copy wins. A link when both are on one filesystem; otherwise a copy to a temporary name beside the target,
 * renamed into place (no reader ever sees half a file).
 */
async function moveInto(source: string, target: string): Promise<'moved' | 'present'> {
  await fs.mkdir(path.dirname(target), { recursive: true });
  let outcome: 'moved' | 'present' = 'moved';
  try {
    await fs.link(source, target);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') outcome = 'present';
    else if (code === 'EXDEV' || code === 'EPERM') {
      if (await exists(target)) outcome = 'present';
      else {
        const temporary = `${target}.tmp-${process.pid}-${Date.now()}`;
        await fs.copyFile(source, temporary);
        await fs.chmod(temporary, 0o444);
        await fs.rename(temporary, target);
      }
    } else throw err;
  }
  await fs.rm(source, { force: true });
  return outcome;
}

const exists = (p: string) =>
  fs.stat(p).then(
    () => true,
    () => false,
  );
