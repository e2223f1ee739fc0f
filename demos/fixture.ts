import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** A small git repository (one commit on `main`) for the demos, in a new directory under `root`. */
export function makeFixtureRepo(root: string): string {
  const dir = join(root, `fixture-${Date.now().toString(36)}`);
  mkdirSync(dir, { recursive: true });
  const git = (...args: string[]) => execFileSync('git', args, { cwd: dir, stdio: 'pipe' }).toString().trim();
  git('init', '-q', '-b', 'main');
  writeFileSync(join(dir, 'README.md'), '# Fixture\n\nA small repository for the Orchard demo.\n');
  git('add', '-A');
  git('-c', 'user.name=Orchard demo', '-c', 'user.email=demo@orchard.invalid', 'commit', '-q', '-m', 'initial commit');
  return dir;
}
