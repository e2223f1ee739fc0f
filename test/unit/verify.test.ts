import test, { type ExecutionContext } from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import fc from 'fast-check';
import {
  compareSnapshots,
  describeChanges,
  protectedFilesOpened,
  snapshotProtected,
  type ProtectedChange,
  type VerifyLayout,
} from '../../activities/bash/verify';
import { ISOLATION_MARKER, markWorktreeIsolated } from '../../activities/git/backstop';
import { WorkspaceError } from '../../activities/workspace/paths';
import { gitIn as git } from '../helpers/git';

/**
 * Layer 3 by effect (docs/confinement.md): each protected thing is changed on the host, mostly with git itself, and
 * the comparison must name exactly that change; the child's own work must compare equal. Real repositories, no
 * sandbox: this layer is what notices when the sandbox let something through.
 */

interface Fixture {
  base: string;
  main: string;
  common: string;
  sib: string;
  sibAdmin: string;
  child: string;
  admin: string;
  remote: string;
  layout: VerifyLayout;
}

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

const ROOT = realpathSync(tmpdir());
let template: string | undefined;

function commitFile(cwd: string, name: string, text: string, message = name): string {
  writeFileSync(path.join(cwd, name), text);
  git(cwd, 'add', name);
  git(cwd, 'commit', '--quiet', '-m', message);
  return git(cwd, 'rev-parse', 'HEAD');
}

/**
 * The shared repository: main checkout on `main` (two commits), branch `other`, tags `v1` (light) and `v2`
 * (annotated, so packed-refs has a peeled line), two stashes, a pre-commit hook, worktree config on; a sibling
 * session on `orchard/s2/work` and the child on `orchard/s1/work`, each a commit ahead; the child's branch pushed
 * to a bare `origin`. Everything is packed, then `loose` and `t-loose` are written loose.
 */
function buildTemplate(): string {
  const base = mkdtempSync(path.join(ROOT, 'orchard-verify-template-'));
  created.push(base);
  const main = path.join(base, 'repo');
  git(base, 'init', '--quiet', '--bare', '-b', 'main', path.join(base, 'remote.git'));
  git(base, 'init', '--quiet', '-b', 'main', main);
  commitFile(main, 'README.md', '# demo\n', 'initial');
  commitFile(main, 'a.txt', 'a\n', 'second');
  git(main, 'branch', 'other', 'HEAD~1');
  git(main, 'tag', 'v1');
  git(main, 'tag', '-a', '-m', 'v2', 'v2');
  git(main, 'config', 'extensions.worktreeConfig', 'true');
  git(main, 'remote', 'add', 'origin', path.join(base, 'remote.git'));
  git(main, 'push', '--quiet', 'origin', 'main', 'other');
  for (const n of [1, 2]) {
    writeFileSync(path.join(main, 'README.md'), `# demo\nstash ${n}\n`);
    git(main, 'stash', 'push', '--quiet', '-m', `stash ${n}`);
  }
  writeFileSync(path.join(main, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  for (const id of ['s2', 's1']) {
    const wt = path.join(base, 'worktrees', id);
    git(main, 'worktree', 'add', '--quiet', '-b', `orchard/${id}/work`, wt);
    commitFile(wt, `${id}.txt`, `${id} work\n`);
  }
  git(path.join(base, 'worktrees', 's1'), 'push', '--quiet', 'origin', 'orchard/s1/work');
  git(main, 'pack-refs', '--all');
  git(main, 'branch', 'loose', 'HEAD~1');
  git(main, 'tag', 't-loose');
  return base;
}

/** A fresh copy of the template; git keeps absolute paths, rewritten here (both links of each worktree, the remote). */
function fixture(): Fixture {
  template ??= buildTemplate();
  const base = mkdtempSync(path.join(ROOT, 'orchard-verify-'));
  created.push(base);
  execFileSync('cp', ['-a', `${template}/.`, base]);
  const main = path.join(base, 'repo');
  const common = path.join(main, '.git');
  for (const id of ['s1', 's2']) {
    const admin = path.join(common, 'worktrees', id);
    const wt = path.join(base, 'worktrees', id);
    writeFileSync(path.join(wt, '.git'), `gitdir: ${admin}\n`);
    writeFileSync(path.join(admin, 'gitdir'), `${path.join(wt, '.git')}\n`);
  }
  git(main, 'remote', 'set-url', 'origin', path.join(base, 'remote.git'));
  const child = path.join(base, 'worktrees', 's1');
  const admin = path.join(common, 'worktrees', 's1');
  return {
    base,
    main,
    common,
    sib: path.join(base, 'worktrees', 's2'),
    sibAdmin: path.join(common, 'worktrees', 's2'),
    child,
    admin,
    remote: path.join(base, 'remote.git'),
    layout: { commonDir: common, adminDir: admin, worktree: child, branch: 'orchard/s1/work', remotes: ['origin'] },
  };
}

/** A digest of every file, link and directory under `dir` (type, mode, content): did anything change at all? */
function treeDigest(dir: string): string {
  const hash = createHash('sha256');
  const walk = (abs: string) => {
    const st = lstatSync(abs);
    hash.update(`${abs}\0${st.mode}\0`);
    if (st.isSymbolicLink()) hash.update(readlinkSync(abs));
    else if (st.isFile()) hash.update(readFileSync(abs));
    else if (st.isDirectory()) for (const name of readdirSync(abs).sort()) walk(path.join(abs, name));
  };
  walk(dir);
  return hash.digest('hex');
}

const sha = (f: Fixture, rev: string) => git(f.main, 'rev-parse', rev);
const read = (file: string) => readFileSync(file, 'utf8');
const hookState = (file: string, mode: string) => {
  const content = readFileSync(file);
  return `file mode ${mode}, ${content.length} bytes, sha256 ${createHash('sha256').update(content).digest('hex').slice(0, 16)}`;
};
const byPath = (a: ProtectedChange, b: ProtectedChange) => a.kind.localeCompare(b.kind) || a.path.localeCompare(b.path);

function sameChanges(t: ExecutionContext, actual: ProtectedChange[], expected: ProtectedChange[]): void {
  t.deepEqual([...actual].sort(byPath), [...expected].sort(byPath));
}

interface Case {
  name: string;
  /** Runs before the first snapshot. */
  setup?: (f: Fixture) => void | Promise<void>;
  /** Makes the change after the first snapshot and returns what the comparison must report. */
  run: (f: Fixture) => ProtectedChange[];
}

/** Reads `file`, runs `act`, reads it again: the `before`/`after` of a file's change, with absent sides left out. */
function fileChange(kind: ProtectedChange['kind'], file: string, act: () => void): ProtectedChange {
  const tryRead = () => {
    try {
      return read(file);
    } catch {
      return undefined;
    }
  };
  const before = tryRead();
  act();
  const after = tryRead();
  const change: ProtectedChange = { kind, path: file, change: before === undefined ? 'created' : after === undefined ? 'deleted' : 'modified' };
  if (before !== undefined) change.before = before;
  if (after !== undefined) change.after = after;
  return change;
}

const PROTECTED: Case[] = [
  {
    name: 'a packed branch moved (branch -f other main)',
    run: (f) => {
      const before = sha(f, 'other');
      git(f.main, 'branch', '-f', 'other', 'main');
      return [{ kind: 'ref', path: 'refs/heads/other', change: 'modified', before, after: sha(f, 'main') }];
    },
  },
  {
    name: 'the checked-out main moved (reset --soft HEAD~1 in the main checkout)',
    run: (f) => {
      const before = sha(f, 'main');
      git(f.main, 'reset', '--soft', 'HEAD~1');
      return [{ kind: 'ref', path: 'refs/heads/main', change: 'modified', before, after: sha(f, 'main') }];
    },
  },
  {
    name: 'a loose branch moved',
    run: (f) => {
      const before = sha(f, 'loose');
      git(f.main, 'update-ref', 'refs/heads/loose', 'main');
      return [{ kind: 'ref', path: 'refs/heads/loose', change: 'modified', before, after: sha(f, 'main') }];
    },
  },
  {
    name: 'a tag created (update-ref refs/tags/x)',
    run: (f) => {
      git(f.main, 'update-ref', 'refs/tags/x', 'HEAD');
      return [{ kind: 'ref', path: 'refs/tags/x', change: 'created', after: sha(f, 'HEAD') }];
    },
  },
  {
    name: 'a packed tag deleted (tag -d v1)',
    run: (f) => {
      const before = sha(f, 'v1');
      git(f.main, 'tag', '-d', 'v1');
      return [{ kind: 'ref', path: 'refs/tags/v1', change: 'deleted', before }];
    },
  },
  {
    name: "a sibling session's branch moved (a commit in the sibling)",
    run: (f) => {
      const before = sha(f, 'orchard/s2/work');
      const after = commitFile(f.sib, 'more.txt', 'more\n');
      return [{ kind: 'ref', path: 'refs/heads/orchard/s2/work', change: 'modified', before, after }];
    },
  },
  {
    name: "a remote-tracking ref that is not the child's (update-ref refs/remotes/origin/main)",
    run: (f) => {
      const before = sha(f, 'refs/remotes/origin/main');
      git(f.main, 'update-ref', 'refs/remotes/origin/main', 'HEAD~1');
      return [{ kind: 'ref', path: 'refs/remotes/origin/main', change: 'modified', before, after: sha(f, 'HEAD~1') }];
    },
  },
  {
    name: 'the child-named tracking ref of a remote not in the layout (upstream)',
    run: (f) => {
      git(f.main, 'update-ref', 'refs/remotes/upstream/orchard/s1/work', 'HEAD');
      return [{ kind: 'ref', path: 'refs/remotes/upstream/orchard/s1/work', change: 'created', after: sha(f, 'HEAD') }];
    },
  },
  {
    name: 'a note added (refs/notes/commits)',
    run: (f) => {
      git(f.main, 'notes', 'add', '-m', 'n', 'HEAD');
      return [{ kind: 'ref', path: 'refs/notes/commits', change: 'created', after: sha(f, 'refs/notes/commits') }];
    },
  },
  {
    name: "a sibling's per-worktree ref (refs/bisect/bad in its admin dir)",
    run: (f) => {
      git(f.sib, 'update-ref', 'refs/bisect/bad', 'HEAD');
      return [{ kind: 'ref', path: 'worktrees/s2/refs/bisect/bad', change: 'created', after: git(f.sib, 'rev-parse', 'HEAD') }];
    },
  },
  {
    name: "the branch of a session whose id extends the child's (orchard/s10/work)",
    run: (f) => {
      git(f.main, 'update-ref', 'refs/heads/orchard/s10/work', 'HEAD');
      return [{ kind: 'ref', path: 'refs/heads/orchard/s10/work', change: 'created', after: sha(f, 'HEAD') }];
    },
  },
  {
    name: "the child's own ref made a symbolic ref to main",
    run: (f) => {
      git(f.child, 'symbolic-ref', 'refs/heads/orchard/s1/evil', 'refs/heads/main');
      return [{ kind: 'ref', path: 'refs/heads/orchard/s1/evil', change: 'created', after: 'ref: refs/heads/main' }];
    },
  },
  {
    name: 'a fifo planted as a loose ref is recorded by type, and the snapshot does not block on it',
    run: (f) => {
      execFileSync('mkfifo', [path.join(f.common, 'refs', 'heads', 'fifo')]);
      return [{ kind: 'ref', path: 'refs/heads/fifo', change: 'created', after: 'other: fifo' }];
    },
  },
  {
    name: 'a symlinked loose ref is recorded as a link, not followed',
    run: (f) => {
      symlinkSync('/etc/hostname', path.join(f.common, 'refs', 'tags', 'link'));
      return [{ kind: 'ref', path: 'refs/tags/link', change: 'created', after: 'symlink to /etc/hostname' }];
    },
  },
  {
    name: 'a packed value edited in packed-refs by hand',
    run: (f) => {
      const file = path.join(f.common, 'packed-refs');
      const before = sha(f, 'refs/tags/v1');
      const after = sha(f, 'other');
      writeFileSync(file, read(file).replace(`${before} refs/tags/v1`, `${after} refs/tags/v1`));
      return [{ kind: 'ref', path: 'refs/tags/v1', change: 'modified', before, after }];
    },
  },
  {
    name: 'pack-refs --all after a value change reports the value only',
    run: (f) => {
      const before = sha(f, 'other');
      git(f.main, 'update-ref', 'refs/heads/other', 'main');
      git(f.main, 'pack-refs', '--all');
      return [{ kind: 'ref', path: 'refs/heads/other', change: 'modified', before, after: sha(f, 'main') }];
    },
  },
  {
    name: 'a line git cannot read appended to packed-refs',
    run: (f) => {
      appendFileSync(path.join(f.common, 'packed-refs'), 'nonsense\n');
      return [
        {
          kind: 'repository',
          path: path.join(f.common, 'packed-refs'),
          change: 'created',
          after: 'malformed: 1 line(s) git cannot read, the first "nonsense"',
        },
      ];
    },
  },
  {
    name: 'the main checkout detached (checkout --detach)',
    run: (f) => {
      git(f.main, 'checkout', '--quiet', '--detach');
      return [{ kind: 'head', path: path.join(f.common, 'HEAD'), change: 'modified', before: 'ref: refs/heads/main', after: sha(f, 'HEAD') }];
    },
  },
  {
    name: "a sibling's HEAD switched (checkout other in the sibling)",
    run: (f) => {
      git(f.sib, 'checkout', '--quiet', 'other');
      return [
        { kind: 'head', path: path.join(f.sibAdmin, 'HEAD'), change: 'modified', before: 'ref: refs/heads/orchard/s2/work', after: 'ref: refs/heads/other' },
      ];
    },
  },
  {
    name: "the child's HEAD pointed at main (symbolic-ref HEAD refs/heads/main)",
    run: (f) => {
      git(f.child, 'symbolic-ref', 'HEAD', 'refs/heads/main');
      return [{ kind: 'head', path: path.join(f.admin, 'HEAD'), change: 'modified', before: 'ref: refs/heads/orchard/s1/work', after: 'ref: refs/heads/main' }];
    },
  },
  {
    name: "the child's HEAD on another branch, even one of its own (checkout orchard/s1/tmp)",
    run: (f) => {
      git(f.child, 'checkout', '--quiet', '-b', 'orchard/s1/tmp');
      return [
        {
          kind: 'head',
          path: path.join(f.admin, 'HEAD'),
          change: 'modified',
          before: 'ref: refs/heads/orchard/s1/work',
          after: 'ref: refs/heads/orchard/s1/tmp',
        },
      ];
    },
  },
  {
    name: "the child's HEAD deleted (its own HEAD may move, not vanish)",
    run: (f) => {
      unlinkSync(path.join(f.admin, 'HEAD'));
      return [{ kind: 'head', path: path.join(f.admin, 'HEAD'), change: 'deleted', before: 'ref: refs/heads/orchard/s1/work' }];
    },
  },
  {
    name: 'core.hooksPath set to a missing directory (git config core.hooksPath /x)',
    run: (f) => [fileChange('config', path.join(f.common, 'config'), () => git(f.main, 'config', 'core.hooksPath', '/nonexistent-orchard-hooks'))],
  },
  {
    name: 'core.hooksPath set to an existing directory: the config and the new hooks directory',
    setup: (f) => mkdirSync(path.join(f.base, 'hooks2')),
    run: (f) => [
      fileChange('config', path.join(f.common, 'config'), () => git(f.main, 'config', 'core.hooksPath', path.join(f.base, 'hooks2'))),
      { kind: 'hooks', path: path.join(f.base, 'hooks2'), change: 'created', after: 'directory' },
    ],
  },
  {
    name: 'a hook planted in the directory core.hooksPath names',
    setup: (f) => {
      mkdirSync(path.join(f.base, 'hooks2'));
      git(f.main, 'config', 'core.hooksPath', path.join(f.base, 'hooks2'));
    },
    run: (f) => {
      const hook = path.join(f.base, 'hooks2', 'post-checkout');
      writeFileSync(hook, '#!/bin/sh\necho planted\n', { mode: 0o755 });
      return [{ kind: 'hooks', path: hook, change: 'created', after: hookState(hook, '755') }];
    },
  },
  {
    name: "core.fsmonitor in the child's own config.worktree (git config --worktree)",
    run: (f) => [fileChange('config', path.join(f.admin, 'config.worktree'), () => git(f.child, 'config', '--worktree', 'core.fsmonitor', '/x'))],
  },
  {
    name: "a sibling's config.worktree",
    run: (f) => [fileChange('config', path.join(f.sibAdmin, 'config.worktree'), () => git(f.sib, 'config', '--worktree', 'x.y', 'z'))],
  },
  {
    name: 'a hook written into .git/hooks',
    run: (f) => {
      const hook = path.join(f.common, 'hooks', 'post-checkout');
      writeFileSync(hook, '#!/bin/sh\necho planted\n', { mode: 0o755 });
      return [{ kind: 'hooks', path: hook, change: 'created', after: hookState(hook, '755') }];
    },
  },
  {
    name: 'a hook made non-executable (mode only)',
    run: (f) => {
      const hook = path.join(f.common, 'hooks', 'pre-commit');
      const before = hookState(hook, '755');
      chmodSync(hook, 0o644);
      return [{ kind: 'hooks', path: hook, change: 'modified', before, after: hookState(hook, '644') }];
    },
  },
  {
    name: 'a hook replaced by a symlink',
    run: (f) => {
      const hook = path.join(f.common, 'hooks', 'pre-commit');
      const before = hookState(hook, '755');
      unlinkSync(hook);
      symlinkSync('/bin/true', hook);
      return [{ kind: 'hooks', path: hook, change: 'modified', before, after: 'symlink to /bin/true' }];
    },
  },
  {
    name: 'git stash push in the main checkout',
    run: (f) => {
      const before = sha(f, 'refs/stash');
      writeFileSync(path.join(f.main, 'README.md'), 'third\n');
      const log = fileChange('stash', path.join(f.common, 'logs', 'refs', 'stash'), () => git(f.main, 'stash', 'push', '--quiet'));
      return [{ kind: 'stash', path: 'refs/stash', change: 'modified', before, after: sha(f, 'refs/stash') }, log];
    },
  },
  {
    name: 'git stash drop (the top entry)',
    run: (f) => {
      const before = sha(f, 'refs/stash');
      const log = fileChange('stash', path.join(f.common, 'logs', 'refs', 'stash'), () => git(f.main, 'stash', 'drop', '--quiet'));
      return [{ kind: 'stash', path: 'refs/stash', change: 'modified', before, after: sha(f, 'refs/stash') }, log];
    },
  },
  {
    name: 'git stash drop stash@{1} (only the stash reflog changes)',
    run: (f) => [fileChange('stash', path.join(f.common, 'logs', 'refs', 'stash'), () => git(f.main, 'stash', 'drop', '--quiet', 'stash@{1}'))],
  },
  {
    name: 'git stash clear',
    run: (f) => {
      const before = sha(f, 'refs/stash');
      const log = fileChange('stash', path.join(f.common, 'logs', 'refs', 'stash'), () => git(f.main, 'stash', 'clear'));
      return [{ kind: 'stash', path: 'refs/stash', change: 'deleted', before }, log];
    },
  },
  {
    name: 'git worktree add --detach',
    run: (f) => {
      const wt = path.join(f.base, 'worktrees', 'new');
      git(f.main, 'worktree', 'add', '--quiet', '--detach', wt);
      const admin = path.join(f.common, 'worktrees', 'new');
      return [
        { kind: 'worktrees', path: admin, change: 'created', after: 'directory' },
        { kind: 'worktrees', path: path.join(admin, 'gitdir'), change: 'created', after: `${wt}/.git\n` },
        { kind: 'worktrees', path: path.join(admin, 'commondir'), change: 'created', after: '../..\n' },
        { kind: 'head', path: path.join(admin, 'HEAD'), change: 'created', after: sha(f, 'HEAD') },
      ];
    },
  },
  {
    name: 'git worktree remove of the sibling',
    run: (f) => {
      const head = 'ref: refs/heads/orchard/s2/work';
      const gitdir = read(path.join(f.sibAdmin, 'gitdir'));
      git(f.main, 'worktree', 'remove', '--force', f.sib);
      return [
        { kind: 'worktrees', path: f.sibAdmin, change: 'deleted', before: 'directory' },
        { kind: 'worktrees', path: path.join(f.sibAdmin, 'gitdir'), change: 'deleted', before: gitdir },
        { kind: 'worktrees', path: path.join(f.sibAdmin, 'commondir'), change: 'deleted', before: '../..\n' },
        { kind: 'head', path: path.join(f.sibAdmin, 'HEAD'), change: 'deleted', before: head },
      ];
    },
  },
  {
    name: 'git worktree lock of the sibling',
    run: (f) => [fileChange('worktrees', path.join(f.sibAdmin, 'locked'), () => git(f.main, 'worktree', 'lock', '--reason', 'mine', f.sib))],
  },
  {
    name: "the child's .git file pointed at the sibling's admin dir",
    run: (f) => [fileChange('worktrees', path.join(f.child, '.git'), () => writeFileSync(path.join(f.child, '.git'), `gitdir: ${f.sibAdmin}\n`))],
  },
  {
    name: "the child's .git file replaced by a directory",
    run: (f) => {
      const before = read(path.join(f.child, '.git'));
      unlinkSync(path.join(f.child, '.git'));
      mkdirSync(path.join(f.child, '.git'));
      return [{ kind: 'worktrees', path: path.join(f.child, '.git'), change: 'modified', before, after: 'directory' }];
    },
  },
  {
    name: "the child's own admin dir's gitdir rewritten",
    run: (f) => [fileChange('worktrees', path.join(f.admin, 'gitdir'), () => writeFileSync(path.join(f.admin, 'gitdir'), `${f.main}/.git\n`))],
  },
  {
    name: "the child's own admin dir's commondir rewritten",
    run: (f) => [fileChange('worktrees', path.join(f.admin, 'commondir'), () => writeFileSync(path.join(f.admin, 'commondir'), '/elsewhere\n'))],
  },
  {
    name: "the child's backstop marker deleted from its admin dir",
    setup: (f) => markWorktreeIsolated(f.child, 'orchard/s1/work'),
    run: (f) => [fileChange('worktrees', path.join(f.admin, ISOLATION_MARKER), () => unlinkSync(path.join(f.admin, ISOLATION_MARKER)))],
  },
  {
    name: "the child's backstop marker rewritten to name main",
    setup: (f) => markWorktreeIsolated(f.child, 'orchard/s1/work'),
    run: (f) => [fileChange('worktrees', path.join(f.admin, ISOLATION_MARKER), () => writeFileSync(path.join(f.admin, ISOLATION_MARKER), 'main\n'))],
  },
  {
    name: 'info/exclude changed and info/attributes created',
    run: (f) => [
      fileChange('info', path.join(f.common, 'info', 'exclude'), () => appendFileSync(path.join(f.common, 'info', 'exclude'), 'src/\n')),
      fileChange('info', path.join(f.common, 'info', 'attributes'), () => writeFileSync(path.join(f.common, 'info', 'attributes'), '* filter=x\n')),
    ],
  },
  {
    name: 'objects/info/alternates written',
    run: (f) => [
      fileChange('repository', path.join(f.common, 'objects', 'info', 'alternates'), () =>
        writeFileSync(path.join(f.common, 'objects', 'info', 'alternates'), '/elsewhere/objects\n'),
      ),
    ],
  },
  {
    name: 'shallow written',
    run: (f) => [fileChange('repository', path.join(f.common, 'shallow'), () => writeFileSync(path.join(f.common, 'shallow'), `${sha(f, 'HEAD~1')}\n`))],
  },
  {
    name: 'a commondir planted in the common dir',
    run: (f) => [fileChange('repository', path.join(f.common, 'commondir'), () => writeFileSync(path.join(f.common, 'commondir'), '/elsewhere\n'))],
  },
];

for (const c of PROTECTED) {
  test(`protected: ${c.name} is reported exactly`, async (t) => {
    const f = fixture();
    await c.setup?.(f);
    const before = await snapshotProtected(f.layout);
    const expected = c.run(f);
    const changes = compareSnapshots(before, await snapshotProtected(f.layout));
    sameChanges(t, changes, expected);
    t.true(expected.length > 0);
  });
}

/** The child's ordinary work: none of it is a protected change. Each runs in the child's worktree unless noted. */
const OWN_WORK: Array<{ name: string; run: (f: Fixture) => void }> = [
  { name: 'commits on its branch (and their reflog)', run: (f) => [1, 2].forEach((n) => commitFile(f.child, `c${n}.txt`, `${n}\n`)) },
  { name: 'a new branch of its own (orchard/s1/tmp)', run: (f) => git(f.child, 'branch', 'orchard/s1/tmp') },
  { name: 'an own symbolic ref to its own branch', run: (f) => git(f.child, 'symbolic-ref', 'refs/heads/orchard/s1/alias', 'refs/heads/orchard/s1/work') },
  { name: 'deleting its own packed tracking ref', run: (f) => git(f.child, 'update-ref', '-d', 'refs/remotes/origin/orchard/s1/work') },
  { name: 'object writes (hash-object -w)', run: (f) => execFileSync('git', ['hash-object', '-w', '--stdin'], { cwd: f.child, input: 'blob\n' }) },
  { name: 'its index (git add)', run: (f) => (writeFileSync(path.join(f.child, 'new.txt'), 'x\n'), git(f.child, 'add', 'new.txt')) },
  {
    name: 'a rebase of its own commits stopped on a conflict (HEAD detached while it is in progress)',
    run: (f) => {
      commitFile(f.child, 'r.txt', 'one\n');
      commitFile(f.child, 'r.txt', 'two\n');
      // Dropping the first makes the second conflict: the rebase stops with HEAD detached.
      const r = spawnSync('git', ['rebase', '--quiet', '-i', 'HEAD~2'], {
        cwd: f.child,
        env: { ...process.env, GIT_SEQUENCE_EDITOR: 'sed -i 1d' },
        encoding: 'utf8',
      });
      if (r.status === 0) throw new Error('the rebase did not stop');
    },
  },
  {
    name: 'detaching its HEAD, committing, re-attaching',
    run: (f) => {
      git(f.child, 'checkout', '--quiet', '--detach');
      commitFile(f.child, 'd.txt', 'd\n');
      git(f.child, 'checkout', '--quiet', 'orchard/s1/work');
    },
  },
  {
    name: 'reset --hard and commit --amend',
    run: (f) => (git(f.child, 'reset', '--quiet', '--hard', 'HEAD~1'), git(f.child, 'commit', '--quiet', '--amend', '-m', 'amended')),
  },
  {
    name: 'a push of its branch (its own tracking ref)',
    run: (f) => (commitFile(f.child, 'p.txt', 'p\n'), git(f.child, 'push', '--quiet', 'origin', 'orchard/s1/work')),
  },
  { name: 'files in its worktree', run: (f) => writeFileSync(path.join(f.child, 'scratch.txt'), 'scratch\n') },
  { name: 'pack-refs --all in the main checkout (values unchanged)', run: (f) => git(f.main, 'pack-refs', '--all') },
  { name: 'a commit after its branch was packed', run: (f) => (git(f.main, 'pack-refs', '--all'), commitFile(f.child, 'after.txt', 'after\n')) },
];

for (const c of OWN_WORK) {
  test(`own work: ${c.name} is not a change`, async (t) => {
    const f = fixture();
    const before = await snapshotProtected(f.layout);
    const filesBefore = treeDigest(f.base);
    c.run(f);
    t.deepEqual(compareSnapshots(before, await snapshotProtected(f.layout)), []);
    t.not(treeDigest(f.base), filesBefore, 'the work changed files on disk (not a vacuous pass)');
  });
}

/** Its HEAD off its branch with no rebase of it in progress (detached, bisecting, another branch): a change. */
for (const c of [
  { name: 'detached', run: (f: Fixture) => git(f.child, 'checkout', '--quiet', '--detach', 'HEAD~1') },
  { name: 'bisecting', run: (f: Fixture) => (git(f.child, 'bisect', 'start'), git(f.child, 'bisect', 'bad'), git(f.child, 'bisect', 'good', 'HEAD~2')) },
  {
    name: 'detached beside a faked rebase of another branch',
    run: (f: Fixture) => {
      mkdirSync(path.join(f.layout.adminDir, 'rebase-merge'));
      writeFileSync(path.join(f.layout.adminDir, 'rebase-merge', 'head-name'), 'refs/heads/main\n');
      git(f.child, 'checkout', '--quiet', '--detach');
    },
  },
]) {
  test(`its HEAD ${c.name} outside a rebase of its branch is a change`, async (t) => {
    const f = fixture();
    const before = await snapshotProtected(f.layout);
    c.run(f);
    const changes = compareSnapshots(before, await snapshotProtected(f.layout));
    t.deepEqual(
      changes.map((x) => ({ kind: x.kind, path: x.path, before: x.before })),
      [{ kind: 'head', path: path.join(f.layout.adminDir, 'HEAD'), before: 'ref: refs/heads/orchard/s1/work' }],
    );
  });
}

/** Allowed operations for the property: the child's own work, and value-preserving host maintenance. */
const ALLOWED: Record<string, (f: Fixture, n: number) => void> = {
  commit: (f, n) => void commitFile(f.child, `p${n}.txt`, `${n}\n`),
  ownBranch: (f, n) => git(f.child, 'branch', `orchard/s1/b${n}`),
  detachAndBack: (f) => (git(f.child, 'checkout', '--quiet', '--detach'), git(f.child, 'checkout', '--quiet', 'orchard/s1/work')),
  writeObject: (f, n) => void execFileSync('git', ['hash-object', '-w', '--stdin'], { cwd: f.child, input: `object ${n}\n` }),
  stage: (f, n) => (writeFileSync(path.join(f.child, `s${n}.txt`), `${n}\n`), git(f.child, 'add', `s${n}.txt`)),
  push: (f) => git(f.child, 'push', '--quiet', 'origin', 'orchard/s1/work'),
  packRefs: (f) => git(f.main, 'pack-refs', '--all'),
};

/** A fresh commit on `main`'s tree (the checkout stays clean), so a protected move never lands back where it was. */
const freshCommit = (f: Fixture, n: number) => git(f.main, 'commit-tree', '-p', 'main', '-m', `p${n}`, 'main^{tree}');

/** Protected mutations for the property; each returns the paths it changed (never undoing an earlier one). */
const MUTATIONS: Record<string, (f: Fixture, n: number) => string[]> = {
  tag: (f, n) => (git(f.main, 'update-ref', `refs/tags/p${n}`, 'HEAD'), [`refs/tags/p${n}`]),
  moveMain: (f, n) => (git(f.main, 'update-ref', 'refs/heads/main', freshCommit(f, n)), ['refs/heads/main']),
  moveSibling: (f, n) => (git(f.main, 'update-ref', 'refs/heads/orchard/s2/work', freshCommit(f, n)), ['refs/heads/orchard/s2/work']),
  hook: (f, n) => {
    const hook = path.join(f.common, 'hooks', `h${n}`);
    writeFileSync(hook, `#!/bin/sh\n# ${n}\n`, { mode: 0o755 });
    return [hook];
  },
  config: (f, n) => (git(f.main, 'config', `orchard.k${n}`, 'v'), [path.join(f.common, 'config')]),
  exclude: (f, n) => (appendFileSync(path.join(f.common, 'info', 'exclude'), `p${n}\n`), [path.join(f.common, 'info', 'exclude')]),
  siblingHead: (f, n) => (git(f.sib, 'update-ref', '--no-deref', 'HEAD', freshCommit(f, n)), [path.join(f.sibAdmin, 'HEAD')]),
  stash: (f, n) => {
    writeFileSync(path.join(f.main, 'README.md'), `p${n}\n`);
    git(f.main, 'stash', 'push', '--quiet');
    return ['refs/stash', path.join(f.common, 'logs', 'refs', 'stash')];
  },
  alternates: (f, n) => {
    const file = path.join(f.common, 'objects', 'info', 'alternates');
    appendFileSync(file, `/elsewhere/${n}/objects\n`);
    return [file];
  },
};

const allowedOp = fc.constantFrom(...Object.keys(ALLOWED));
const PROPERTY_RUNS = Number(process.env.VERIFY_PROPERTY_RUNS ?? 12);

test('property: any sequence of allowed operations compares equal', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.array(allowedOp, { minLength: 1, maxLength: 6 }), async (ops) => {
      const f = fixture();
      const before = await snapshotProtected(f.layout);
      ops.forEach((op, n) => ALLOWED[op](f, n));
      const changes = compareSnapshots(before, await snapshotProtected(f.layout));
      rmSync(f.base, { recursive: true, force: true });
      if (changes.length > 0) throw new Error(`${ops.join(', ')} reported ${describeChanges(changes)}`);
    }),
    { numRuns: PROPERTY_RUNS },
  );
  t.pass();
});

test('property: a sequence with protected mutations reports exactly the mutated paths', async (t) => {
  const op = fc.oneof(
    allowedOp.map((name) => ({ allowed: name })),
    fc.constantFrom(...Object.keys(MUTATIONS)).map((name) => ({ mutation: name })),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 5 }), fc.constantFrom(...Object.keys(MUTATIONS)), fc.nat(), async (ops, forced, at) => {
      const sequence: Array<{ allowed?: string; mutation?: string }> = [...ops];
      sequence.splice(at % (ops.length + 1), 0, { mutation: forced });
      const f = fixture();
      const before = await snapshotProtected(f.layout);
      const mutated = new Set<string>();
      sequence.forEach((step, n) => {
        if (step.allowed) ALLOWED[step.allowed](f, n);
        else for (const p of MUTATIONS[step.mutation!](f, n)) mutated.add(p);
      });
      const changes = compareSnapshots(before, await snapshotProtected(f.layout));
      rmSync(f.base, { recursive: true, force: true });
      const reported = [...new Set(changes.map((c) => c.path))].sort();
      const names = sequence.map((s) => s.allowed ?? `*${s.mutation}`).join(', ');
      if (JSON.stringify(reported) !== JSON.stringify([...mutated].sort())) {
        throw new Error(`${names}: mutated ${[...mutated].sort().join(' ')} but reported ${reported.join(' ')}`);
      }
    }),
    { numRuns: PROPERTY_RUNS },
  );
  t.pass();
});

test('describeChanges names every path with its old → new value, and config lines with their section', async (t) => {
  const f = fixture();
  const before = await snapshotProtected(f.layout);
  const otherWas = sha(f, 'other');
  git(f.main, 'branch', '-f', 'other', 'main');
  git(f.main, 'update-ref', 'refs/tags/x', 'HEAD');
  git(f.main, 'tag', '-d', 'v1');
  git(f.main, 'config', 'core.hooksPath', '/nonexistent-orchard-hooks');
  const dotGit = path.join(f.child, '.git');
  const dotGitWas = read(dotGit).trimEnd();
  writeFileSync(dotGit, `gitdir: ${f.sibAdmin}\n`);
  const changes = compareSnapshots(before, await snapshotProtected(f.layout));
  t.is(changes.length, 5);
  const text = describeChanges(changes);

  // Parse what was rendered: one header per change, then `  - `/`  + ` lines under a multi-line one.
  type Rendered = { kind: string; change: string; old?: string; new?: string; lost: string[]; gained: string[] };
  const rendered = new Map<string, Rendered>();
  let current: Rendered | undefined;
  for (const line of text.split('\n')) {
    const single = line.match(/^(\w+) (\S+): (created|deleted|modified): (.*) → (.*)$/);
    const multi = line.match(/^(\w+) (\S+): (created|deleted|modified):$/);
    const sub = line.match(/^ {2}([-+]) (.*)$/);
    if (single) rendered.set(single[2], (current = { kind: single[1], change: single[3], old: single[4], new: single[5], lost: [], gained: [] }));
    else if (multi) rendered.set(multi[2], (current = { kind: multi[1], change: multi[3], lost: [], gained: [] }));
    else if (sub && current) (sub[1] === '-' ? current.lost : current.gained).push(sub[2]);
    else t.fail(`unexpected line ${JSON.stringify(line)}`);
  }
  t.deepEqual([...rendered.keys()].sort(), changes.map((c) => c.path).sort());
  t.like(rendered.get('refs/heads/other'), { kind: 'ref', change: 'modified', old: otherWas, new: sha(f, 'main') });
  t.like(rendered.get('refs/tags/x'), { kind: 'ref', change: 'created', old: '(absent)', new: sha(f, 'HEAD') });
  t.like(rendered.get('refs/tags/v1'), { kind: 'ref', change: 'deleted', old: sha(f, 'main'), new: '(absent)' });
  t.like(rendered.get(dotGit), { kind: 'worktrees', change: 'modified', old: dotGitWas, new: `gitdir: ${f.sibAdmin}` });
  t.like(rendered.get(path.join(f.common, 'config')), {
    kind: 'config',
    change: 'modified',
    lost: [],
    gained: ['[core] hooksPath = /nonexistent-orchard-hooks'],
  });
});

test('describeChanges quotes values that would be ambiguous and lists lost and gained lines', (t) => {
  const text = describeChanges([
    { kind: 'info', path: '/r/.git/info/exclude', change: 'modified', before: 'a\nb\nb\n', after: 'b\nc\n' },
    { kind: 'worktrees', path: '/r/.git/worktrees/x/locked', change: 'created', after: '' },
    { kind: 'head', path: '/r/.git/HEAD', change: 'modified', before: 'ref: refs/heads/main', after: ' x → y' },
  ]);
  t.deepEqual(text.split('\n'), [
    'info /r/.git/info/exclude: modified:',
    '  - a',
    '  - b',
    '  + c',
    'worktrees /r/.git/worktrees/x/locked: created: (absent) → ""',
    'head /r/.git/HEAD: modified: ref: refs/heads/main → " x → y"',
  ]);
  t.is(describeChanges([]), '');
});

test('changes come grouped by kind (refs first), then by path', async (t) => {
  const f = fixture();
  const before = await snapshotProtected(f.layout);
  writeFileSync(path.join(f.common, 'shallow'), `${sha(f, 'HEAD')}\n`);
  git(f.main, 'config', 'orchard.x', 'y');
  git(f.main, 'update-ref', 'refs/tags/b', 'HEAD');
  git(f.main, 'update-ref', 'refs/tags/a', 'HEAD');
  git(f.main, 'checkout', '--quiet', '--detach');
  const changes = compareSnapshots(before, await snapshotProtected(f.layout));
  t.deepEqual(
    changes.map((c) => `${c.kind} ${c.path}`),
    ['ref refs/tags/a', 'ref refs/tags/b', `head ${f.common}/HEAD`, `config ${f.common}/config`, `repository ${f.common}/shallow`],
  );
});

test('a settled file is not read again while unchanged, and a change in place that restores size and mtime is still seen', async (t) => {
  const f = fixture();
  // The fixture's files were just copied: a read keeps nothing until they are a second older than it.
  await new Promise((resolve) => setTimeout(resolve, 1_300));
  const opened = protectedFilesOpened();
  const before = await snapshotProtected(f.layout);
  const first = protectedFilesOpened() - opened;
  t.deepEqual(compareSnapshots(before, await snapshotProtected(f.layout)), []);
  const second = protectedFilesOpened() - opened - first;
  t.true(second < first / 2, `the second snapshot opened ${second} files, the first ${first}`);

  // What `touch -d` cannot hide: the same size, the old mtime, another content (a sibling's ref and a hook).
  const ref = path.join(f.common, 'refs', 'heads', 'loose');
  const hook = path.join(f.common, 'hooks', 'pre-commit');
  const moved = sha(f, 'main');
  for (const [file, text] of [
    [ref, `${moved}\n`],
    [hook, '#!/bin/sh\nexit 1\n'],
  ] as const) {
    const { size, mtimeMs } = statSync(file);
    const times = path.join(f.base, 'times');
    execFileSync('touch', ['-r', file, times]); // the exact (nanosecond) times, as `touch -r` puts them back
    writeFileSync(file, text);
    execFileSync('touch', ['-r', times, file]);
    t.deepEqual([statSync(file).size, statSync(file).mtimeMs], [size, mtimeMs]);
  }
  const changes = compareSnapshots(before, await snapshotProtected(f.layout));
  t.deepEqual(
    changes.map((c) => [c.kind, c.path, c.change]),
    [
      ['ref', 'refs/heads/loose', 'modified'],
      ['hooks', hook, 'modified'],
    ],
  );
});

test('a snapshot survives JSON and compares the same', async (t) => {
  const f = fixture();
  const before = JSON.parse(JSON.stringify(await snapshotProtected(f.layout)));
  git(f.main, 'update-ref', 'refs/tags/x', 'HEAD');
  commitFile(f.child, 'own.txt', 'own\n');
  const after = JSON.parse(JSON.stringify(await snapshotProtected(f.layout)));
  t.deepEqual(compareSnapshots(before, after), [{ kind: 'ref', path: 'refs/tags/x', change: 'created', after: sha(f, 'HEAD') }]);
});

const BAD_LAYOUTS: Array<[string, (l: VerifyLayout) => VerifyLayout, RegExp]> = [
  ['a relative commonDir', (l) => ({ ...l, commonDir: 'repo/.git' }), /commonDir must be a normalised absolute path/],
  ['an unnormalised worktree', (l) => ({ ...l, worktree: `${l.worktree}/../s1` }), /worktree must be a normalised absolute path/],
  ['an adminDir outside <common>/worktrees', (l) => ({ ...l, adminDir: path.join(l.commonDir, 's1') }), /adminDir .* is not a directory directly under/],
  ['a legacy branch orchard/<id>', (l) => ({ ...l, branch: 'orchard/s1' }), /branch "orchard\/s1" is not orchard\/<sessionId>\/<leaf>/],
  ['a branch outside orchard/', (l) => ({ ...l, branch: 'main' }), /branch "main" is not/],
  ['a remote name with a slash', (l) => ({ ...l, remotes: ['a/b'] }), /remote name "a\/b" is not a single ref path component/],
];

for (const [name, bad, message] of BAD_LAYOUTS) {
  test(`snapshotProtected refuses ${name} with invalid_input`, async (t) => {
    const f = fixture();
    const err = await t.throwsAsync(snapshotProtected(bad(f.layout)), { instanceOf: WorkspaceError, message });
    t.is(err?.code, 'invalid_input');
  });
}

test('compareSnapshots refuses snapshots of different layouts, and non-snapshots', async (t) => {
  const f = fixture();
  const a = await snapshotProtected(f.layout);
  const b = { ...a, layout: { ...a.layout, worktree: f.sib } };
  t.is(t.throws(() => compareSnapshots(a, b), { instanceOf: WorkspaceError, message: /different layouts \(worktree/ })?.code, 'invalid_input');
  t.throws(() => compareSnapshots(a, {} as never), { instanceOf: WorkspaceError, message: /after is not a ProtectedSnapshot/ });
});
