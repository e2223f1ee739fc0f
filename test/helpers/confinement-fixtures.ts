import type { ExecutionContext } from 'ava';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import * as path from 'node:path';
import { sessionTmpDir } from '../../activities/bash/confinement';
import { sessionQuarantineDir } from '../../activities/git/quarantine';
import { buildCommandEnv, sessionHomeDir } from '../../activities/bash/env';
import { confinedSessionBranch, resolveSandboxLayout, type SandboxLayout } from '../../activities/bash/sandbox';
import { installRefBackstop, markWorktreeIsolated } from '../../activities/git/backstop';
import { prepareWorktree } from '../../activities/git/worktree';
import { gitIn, gitIn as git } from './git';

/**
 * The confinement fixtures of issue 10 (docs/confinement.md), shared by the sandbox's unit suite
 * (test/unit/sandbox.test.ts, through buildSandboxArgv) and the effect suite through the real CLI
 * (test/e2e/exec-confinement.test.ts, through `orchard exec`): a real git layout, the child's allowance, a
 * snapshot of everything outside it, the attack table and the benign table.
 */

const INSTALL = path.resolve(__dirname, '..', '..');
/** The project's main checkout (the common dir's checkout of the installation; the installation itself when it is no git checkout). */
const PROJECT_MAIN = (() => {
  try {
    const common = execFileSync('git', ['rev-parse', '--path-format=absolute', '--git-common-dir'], { cwd: INSTALL, encoding: 'utf8', stdio: 'pipe' }).trim();
    return path.basename(common) === '.git' ? path.dirname(common) : INSTALL;
  } catch {
    return INSTALL;
  }
})();
/** The child's session id in every fixture (branch orchard/c1/work); the sibling session is s1. */
const CHILD_ID = 'c1';
const SIBLING_ID = 's1';

/**
 * Where fixtures live. Outside /tmp (as in production, `<state dir>/worktrees`) the main checkout and the sibling
 * are visible read-only in the sandbox; under /tmp they are hidden by the private /tmp and only the shared
 * repository is shown again.
 */
const underPrivateTmp = (dir: string) => ['/tmp', '/var/tmp', '/dev/shm', tmpdir()].some((t) => dir === t || dir.startsWith(`${t}/`));
// A checkout under /tmp (a CI clone there) cannot hold the "outside" fixtures: the sandbox's private /tmp hides them.
export const OUTSIDE = underPrivateTmp(INSTALL) ? path.join(homedir(), '.cache', 'orchard', 'sandbox-test') : path.join(INSTALL, '.test-tmp');
export const ROOTS: ReadonlyArray<readonly [string, string]> = [
  ['outside /tmp', OUTSIDE],
  ['under /tmp', tmpdir()],
];

const created: string[] = [];
/** Removes every fixture (and template) made by this process; call from `test.after.always`. */
export function removeFixtures(): void {
  created.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
}

export interface Fixture {
  base: string;
  main: string;
  common: string;
  sib: string;
  sibAdmin: string;
  child: string;
  /** The child's own admin dir, `<common>/worktrees/c1`. */
  admin: string;
  remote: string;
  home: string;
  workerHome: string;
  layout: SandboxLayout;
  env: Record<string, string>;
}

const templates = new Map<string, string>();

/**
 * The shared repository as Orchard lays it out: the main checkout on `main` (plus branch `other`, tag `v1`, a
 * stash, a pre-commit hook), a bare remote `origin` that also has a tag the repository lacks, and the sessions'
 * worktrees made by prepareWorktree itself (`worktrees/<id>` on `orchard/<id>/work`, the HOME in
 * `worktrees/.homes/<id>`), each one commit ahead, the child's branch pushed to the remote.
 */
async function buildRepositories(base: string): Promise<void> {
  const remote = path.join(base, 'remote.git');
  const main = path.join(base, 'repo');
  git(base, 'init', '--quiet', '--bare', '-b', 'main', remote);
  git(base, 'init', '--quiet', '-b', 'main', main);
  writeFileSync(path.join(main, 'README.md'), '# demo\n');
  git(main, 'add', '.');
  git(main, 'commit', '--quiet', '-m', 'initial');
  git(main, 'branch', 'other');
  git(main, 'tag', 'v1');
  git(main, 'remote', 'add', 'origin', remote);
  git(main, 'push', '--quiet', 'origin', 'main', 'other');
  // A tag only the remote has: `git fetch --tags` would create it in the shared repository.
  git(main, 'tag', 'remote-only');
  git(main, 'push', '--quiet', 'origin', 'refs/tags/remote-only');
  git(main, 'tag', '-d', 'remote-only');
  writeFileSync(path.join(main, 'README.md'), '# demo\nstashed\n');
  git(main, 'stash', '--quiet');
  writeFileSync(path.join(main, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  for (const id of [SIBLING_ID, CHILD_ID]) {
    const { worktree } = await prepareWorktree({ repo: main, sessionId: id, worktreeRoot: path.join(base, 'worktrees') });
    writeFileSync(path.join(worktree, `${id}.txt`), `${id} work\n`);
    git(worktree, 'add', '.');
    git(worktree, 'commit', '--quiet', '-m', `${id} work`);
  }
  git(path.join(base, 'worktrees', CHILD_ID), 'push', '--quiet', '-u', 'origin', confinedSessionBranch(CHILD_ID));
}

/**
 * A fresh copy of the layout (buildRepositories) under `root`, with the session HOME holding a `.bashrc` and a
 * fake worker HOME with a credential beside it. `backstop`: install the ref backstop and mark the child's
 * worktree isolated, as a session's preparation (and `orchard exec`) does; without it, what is stopped is
 * stopped by the mount namespace alone.
 */
export async function fixture(root: string = ROOTS[0][1], options: { backstop?: boolean } = {}): Promise<Fixture> {
  mkdirSync(root, { recursive: true });
  const base = mkdtempSync(path.join(root, 'orchard-sandbox-'));
  created.push(base);
  const remote = path.join(base, 'remote.git');
  const main = path.join(base, 'repo');
  const common = path.join(main, '.git');
  const child = path.join(base, 'worktrees', CHILD_ID);
  const sib = path.join(base, 'worktrees', SIBLING_ID);
  // Built once per root and copied: git records absolute paths, rewritten here (both links of each worktree).
  let template = templates.get(root);
  if (!template) {
    template = mkdtempSync(path.join(root, 'orchard-sandbox-template-'));
    created.push(template);
    await buildRepositories(template);
    templates.set(root, template);
  }
  execFileSync('cp', ['-a', `${template}/.`, base]);
  for (const wt of [sib, child]) {
    const admin = path.join(common, 'worktrees', path.basename(wt));
    writeFileSync(path.join(wt, '.git'), `gitdir: ${admin}\n`);
    writeFileSync(path.join(admin, 'gitdir'), `${path.join(wt, '.git')}\n`);
  }
  git(main, 'remote', 'set-url', 'origin', remote);
  const home = sessionHomeDir(child, CHILD_ID);
  mkdirSync(home, { recursive: true });
  writeFileSync(path.join(home, '.bashrc'), '# session rc\n');
  const workerHome = path.join(base, 'workerhome');
  mkdirSync(workerHome);
  writeFileSync(path.join(workerHome, '.git-credentials'), 'https://user:secret@example.invalid\n');
  if (options.backstop) {
    await installRefBackstop(child);
    await markWorktreeIsolated(child, confinedSessionBranch(CHILD_ID));
  }
  const layout = await resolveSandboxLayout({
    commonDir: common,
    worktree: child,
    branch: confinedSessionBranch(CHILD_ID),
    tmpDir: sessionTmpDir(child, CHILD_ID),
    quarantine: sessionQuarantineDir(child, CHILD_ID),
    home,
    hide: [workerHome],
  });
  const env = buildCommandEnv({
    worktree: child,
    sessionId: CHILD_ID,
    branch: layout.branch,
    from: { PATH: process.env.PATH },
  });
  const sibAdmin = path.join(common, 'worktrees', SIBLING_ID);
  return { base, main, common, sib, sibAdmin, child, admin: layout.adminDir, remote, home, workerHome, layout, env };
}

/** A name no fixture or host path has, for files an attack tries to create outside the fixture. */
export function newMarker(): string {
  return `orchard-sandbox-${process.pid}-${Math.random().toString(36).slice(2)}`;
}

/** `{main}`-style placeholders in a command, so the table reads like the shell an agent would type. */
export function fill(f: Fixture, command: string, marker: string): string {
  const values: Record<string, string> = {
    main: f.main,
    common: f.common,
    sib: f.sib,
    sibAdmin: f.sibAdmin,
    admin: f.admin,
    remote: f.remote,
    workerHome: f.workerHome,
    install: INSTALL,
    project: PROJECT_MAIN,
    marker,
  };
  return command.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}

/**
 * Host paths outside every fixture that attacks try to create (the installation, the project's main checkout,
 * the worker's HOME). None may exist after an attack; removeOutsideMarkers cleans up after a failed one.
 */
export function outsideMarkers(marker: string): string[] {
  return [
    path.join(INSTALL, '.sandbox-pwned'),
    path.join(INSTALL, marker),
    path.join(PROJECT_MAIN, marker),
    path.join('/root', marker),
    path.join(homedir(), marker),
  ];
}

export function removeOutsideMarkers(marker: string): void {
  for (const p of outsideMarkers(marker)) if (existsSync(p) && path.basename(p) === marker) rmSync(p, { force: true });
}

/** The child's allowance, relative to the fixture base: everything else is compared. */
function allowance(f: Fixture): string[] {
  const rel = (p: string) => path.relative(f.base, p);
  return [
    rel(f.child),
    rel(f.layout.adminDir),
    rel(path.join(f.common, 'objects')),
    rel(path.join(f.common, `refs/heads/orchard/${CHILD_ID}`)),
    rel(path.join(f.common, `logs/refs/heads/orchard/${CHILD_ID}`)),
    rel(path.join(f.common, `refs/remotes/origin/orchard/${CHILD_ID}`)),
    rel(path.join(f.common, `logs/refs/remotes/origin/orchard/${CHILD_ID}`)),
    // The bare remote on this disk takes a push of the child's own branch: its objects and that branch.
    rel(path.join(f.remote, 'objects')),
    rel(path.join(f.remote, `refs/heads/orchard/${CHILD_ID}`)),
    rel(f.layout.tmpDir),
    rel(f.layout.quarantine!),
  ];
}

/**
 * The shared object store, file by file (content hash): a child may add objects (moved in from its quarantine after
 * a verified command), never remove or change one. Compare with `lostObjects`.
 */
export function sharedObjects(f: Fixture): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const abs = path.join(dir, name);
      const st = lstatSync(abs);
      if (st.isDirectory()) walk(abs);
      else out.set(path.relative(f.common, abs), st.isFile() ? createHash('sha1').update(readFileSync(abs)).digest('hex') : 'other');
    }
  };
  walk(path.join(f.common, 'objects'));
  return out;
}

/** Objects of `before` that are gone or changed in `after` (added ones are fine). */
export function lostObjects(before: Map<string, string>, after: Map<string, string>): string[] {
  return [...before].filter(([file, hash]) => after.get(file) !== hash).map(([file]) => `${file}: ${after.has(file) ? 'changed' : 'gone'}`);
}

/** Every file, link and directory outside the allowance: type, mode and content hash (or link target). */
function files(f: Fixture): Record<string, string> {
  return tree(f.base, allowance(f));
}

/** Every file, link and directory of the fixture, the child's allowance included (for what may write none of it). */
export function everything(f: Fixture): Record<string, string> {
  return tree(f.base, []);
}

function tree(base: string, skipped: readonly string[]): Record<string, string> {
  const skip = new Set(skipped);
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    if (skip.has(rel)) return;
    const abs = path.join(base, rel);
    const st = lstatSync(abs);
    const mode = (st.mode & 0o7777).toString(8);
    if (st.isSymbolicLink()) out[rel] = `link ${readlinkSync(abs)}`;
    else if (st.isFile()) out[rel] = `file ${mode} ${createHash('sha1').update(readFileSync(abs)).digest('hex')}`;
    else if (st.isDirectory()) {
      out[rel] = `dir ${mode}`;
      for (const name of readdirSync(abs)) walk(rel ? path.join(rel, name) : name);
    } else out[rel] = 'other';
  };
  walk('');
  return out;
}

/** A git command whose failure (a broken repository) is a difference to report, not a crash of the snapshot. */
function gitOrFailure(cwd: string, ...args: string[]): string {
  try {
    return gitIn(cwd, ...args);
  } catch (err) {
    return `failed: ${(err as Error).message.split('\n').slice(0, 2).join(' ')}`;
  }
}

/** What git says about shared state: refs but the child's own, every HEAD, the stash, the worktree list. */
function gitState(f: Fixture): Record<string, string> {
  const git = gitOrFailure;
  const own = new RegExp(`^refs/(heads|remotes/[^/]+)/orchard/${CHILD_ID}/`);
  const refs = git(f.main, 'for-each-ref', '--format=%(refname) %(objectname) %(symref)')
    .split('\n')
    .filter((line) => !own.test(line));
  return {
    refs: refs.join('\n'),
    mainHead: git(f.main, 'symbolic-ref', 'HEAD'),
    sibHead: git(f.sib, 'symbolic-ref', 'HEAD'),
    stash: git(f.main, 'stash', 'list', '--format=%H %gs'),
    // The child's own entry is its admin dir, inside the allowance: it moves with its commits, and its HEAD may
    // even name another branch (`checkout --ignore-other-worktrees main`), which it then cannot move.
    worktrees: git(f.main, 'worktree', 'list', '--porcelain')
      .split('\n\n')
      .filter((entry) => !entry.startsWith(`worktree ${f.layout.worktree}\n`))
      .join('\n\n'),
    remoteRefs: git(f.remote, 'for-each-ref', '--format=%(refname) %(objectname)')
      .split('\n')
      .filter((line) => !own.test(line))
      .join('\n'),
    config: git(f.main, 'config', '--list', '--local'),
  };
}

/** Everything outside the allowance (files and git's view of shared state). */
export function snapshot(f: Fixture) {
  return { files: files(f), git: gitState(f) };
}

/**
 * What the sandbox lets the child write but verification (layer 3) protects: the worktree's `.git` file, the
 * files of its admin dir that tie it to the repository or name its HEAD, symbolic refs in its own ref directory,
 * and the alternates in the (writable) object store. A child's command that changes one of these is allowed to
 * run but must end with `orchard exec` exit 4.
 */
export function verifiedInAllowance(f: Fixture): Record<string, string> {
  const read = (p: string) => {
    try {
      const st = lstatSync(p);
      if (st.isSymbolicLink()) return `link ${readlinkSync(p)}`;
      if (!st.isFile()) return st.isDirectory() ? 'dir' : 'other';
      return readFileSync(p, 'utf8');
    } catch (err) {
      return `absent (${(err as NodeJS.ErrnoException).code})`;
    }
  };
  const out: Record<string, string> = { '.git': read(path.join(f.child, '.git')) };
  for (const name of ['HEAD', 'gitdir', 'commondir', 'locked', 'config.worktree']) out[`admin/${name}`] = read(path.join(f.admin, name));
  for (const name of ['alternates', 'http-alternates']) out[`objects/info/${name}`] = read(path.join(f.common, 'objects', 'info', name));
  out.ownSymrefs = gitOrFailure(f.main, 'for-each-ref', '--format=%(refname) %(symref)', `refs/heads/orchard/${CHILD_ID}/`)
    .split('\n')
    .filter((line) => !line.endsWith(' ') && line !== '')
    .join('\n');
  return out;
}

/**
 * One attack per row: `[name, command]`, the shell an agent would type (placeholders: see fill). Every row must
 * leave everything outside the child's allowance as it was, however it is run.
 */
export const attacks: Array<[string, string]> = [
  // The main checkout and a sibling worktree.
  ['write into the main checkout', 'echo pwned > {main}/README.md'],
  ['create a file in the main checkout', 'touch {main}/planted.txt'],
  ['node writes into the main checkout', `node -e "require('fs').writeFileSync('{main}/README.md', 'pwned')"`],
  ['write into the sibling worktree', 'echo pwned > {sib}/s1.txt'],
  ['a function writes into the main checkout', 'w() { echo pwned > "$1"; }; w {main}/README.md'],
  ['a trap action writes into the main checkout', "trap 'echo pwned > {main}/README.md' EXIT; true"],
  ['copy into the sibling worktree', 'cp -r . {sib}/copy'],
  ['point the sibling’s HEAD at main', "echo 'ref: refs/heads/main' > {sibAdmin}/HEAD"],
  ['truncate the sibling’s index', ': > {sibAdmin}/index'],
  // The shared repository's files.
  ['plant a hook', "printf '#!/bin/sh\\necho pwned\\n' > {common}/hooks/post-checkout && chmod +x {common}/hooks/post-checkout"],
  ['overwrite a hook', 'echo pwned >> {common}/hooks/pre-commit'],
  ['truncate the shared index', ': > {common}/index'],
  ['GIT_INDEX_FILE at the shared index', 'GIT_INDEX_FILE={common}/index git add c1.txt'],
  ['git config writes the shared config', 'git config core.hooksPath /tmp/hooks'],
  ['append to the shared config', "printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> {common}/config"],
  ['write info/exclude', 'echo "*" >> {common}/info/exclude'],
  ['write packed-refs', 'echo "0000000000000000000000000000000000000000 refs/heads/main" >> {common}/packed-refs'],
  // Git options that write to a path.
  ['git diff --output into the main checkout', 'git diff --output={main}/README.md HEAD~1 HEAD'],
  ['git diff --output over a shared hook', 'git diff --output={common}/hooks/pre-commit HEAD~1 HEAD'],
  ['git format-patch -o into the main checkout', 'git format-patch -o {main}/patches -1 HEAD'],
  ['git archive --output into the main checkout', 'git archive --output={main}/planted.tar HEAD'],
  ['git bundle create in the shared repository', 'git bundle create {common}/planted.bundle HEAD'],
  // Moving other refs.
  ['update-ref of main', 'git update-ref refs/heads/main HEAD'],
  ['delete another branch', 'git update-ref -d refs/heads/other'],
  ['branch -f other', 'git branch -f other HEAD'],
  ['branch -f main', 'git branch -f main HEAD'],
  ['rename the own branch onto another name', 'git branch -M other'],
  ['a new branch outside the session directory', 'git branch newbranch'],
  ['move the sibling session’s branch', 'git update-ref refs/heads/orchard/s1/work HEAD'],
  // Without a reflog to append to, only the read-only ref directory stops this one.
  ['a ref in the sibling session’s directory, no reflog', 'git -c core.logAllRefUpdates=false update-ref refs/heads/orchard/s1/x HEAD'],
  ['a tag', 'git tag pwn'],
  ['a note', 'git notes add -m pwn HEAD'],
  ['git stash', 'echo dirty >> c1.txt && git stash'],
  ['git stash drop', 'git stash drop'],
  ['git stash clear', 'git stash clear'],
  ['commit in the main checkout with -C', 'git -C {main} commit --allow-empty -m pwn'],
  ['add in the main checkout with -C', 'echo x > /tmp/f && git -C {main} add -A'],
  ['--git-dir at the shared repository', 'git --git-dir={common} update-ref refs/heads/main HEAD'],
  ['--git-dir and --work-tree at the main checkout', 'git --git-dir={common} --work-tree={main} checkout other -- .'],
  ['GIT_DIR in the environment', 'GIT_DIR={common} git update-ref refs/heads/other HEAD'],
  ['move the main worktree’s HEAD by name', 'git update-ref main-worktree/HEAD HEAD'],
  ['switch the main worktree’s HEAD by symbolic-ref', 'git symbolic-ref main-worktree/HEAD refs/heads/other'],
  ['switch the sibling’s HEAD by symbolic-ref', 'git symbolic-ref worktrees/s1/HEAD refs/heads/other'],
  ['checkout --ignore-other-worktrees main', 'git checkout --ignore-other-worktrees main && git commit --allow-empty -m pwn'],
  ['checkout <branch> -- (git reads it as a switch)', 'git checkout other -- && git commit --allow-empty -m pwn'],
  ['a symbolic ref in the own ref directory naming main', 'git symbolic-ref refs/heads/orchard/c1/alias refs/heads/main'],
  ['push into another branch of the same repository', 'git push . HEAD:other'],
  ['push . HEAD:main', 'git push . HEAD:main'],
  ['fetch into another branch', 'git fetch . HEAD:refs/heads/other'],
  ['push main to the bare remote', 'git push origin HEAD:main'],
  ['fetch --tags from the bare remote', 'git fetch --tags origin'],
  ['fetch --depth from the bare remote (writes shallow)', 'git fetch --depth=1 origin orchard/c1/work'],
  // Hooks and templates.
  ['-c core.hooksPath= past the backstop', 'git -c core.hooksPath=/dev/null update-ref refs/heads/main HEAD'],
  [
    'git init --template over the shared repository',
    "mkdir -p /tmp/tpl/hooks && printf '#!/bin/sh\\necho pwned\\n' > /tmp/tpl/hooks/post-checkout && chmod +x /tmp/tpl/hooks/post-checkout && git init --template=/tmp/tpl {main}",
  ],
  [
    'git init -c init.templateDir over the shared repository',
    "mkdir -p /tmp/tpl/info && echo '*' > /tmp/tpl/info/exclude && git -c init.templateDir=/tmp/tpl init {main}",
  ],
  // Worktrees and housekeeping.
  ['worktree add', 'git worktree add ../evil'],
  ['worktree remove of the sibling', 'git worktree remove --force {sib}'],
  ['worktree prune', 'rm -rf {sib} ; git worktree prune'],
  ['pack-refs', 'git pack-refs --all'],
  ['gc', 'git gc --quiet'],
  ['reflog expire for all worktrees', 'git reflog expire --expire=now --all'],
  // Redirecting the child's own repository files (writable, verified).
  ['replace the worktree .git with the shared repository', 'echo "gitdir: {common}" > .git && git update-ref refs/heads/main HEAD'],
  ['a .git file naming the main checkout’s gitdir, then a commit', 'echo "gitdir: {main}/.git" > .git && git commit --allow-empty -m pwn'],
  ['rewrite commondir in the own admin dir', 'git init --quiet --bare /tmp/evil && echo /tmp/evil > {admin}/commondir && git config core.hooksPath /tmp/hooks'],
  ['alternates in the shared object store', 'echo /tmp/evil-objects > {common}/objects/info/alternates'],
  // The child's HEAD (issue 19): read-only in the sandbox, and put back after a command that could write it.
  ['switch the own HEAD to main', 'git checkout --quiet --ignore-other-worktrees main'],
  ['point the own HEAD at main by symbolic-ref', 'git symbolic-ref HEAD refs/heads/main'],
  ['write the own HEAD file', 'echo "ref: refs/heads/main" > {admin}/HEAD'],
  ['replace the own HEAD by a rename', 'echo "ref: refs/heads/main" > {admin}/HEAD.new && mv -f {admin}/HEAD.new {admin}/HEAD'],
  ['remove the own HEAD', 'rm -f {admin}/HEAD'],
  ['detach the own HEAD', 'git checkout --quiet --detach HEAD~1'],
  ['python switches the own HEAD to main', `python3 -c "import subprocess; subprocess.run(['git', 'checkout', '--ignore-other-worktrees', 'main'])"`],
  [
    'a checkout of the own branch (HEAD writable), then python switches HEAD to main',
    `git checkout --quiet orchard/c1/work && python3 -c "import subprocess; subprocess.run(['git', 'checkout', '--ignore-other-worktrees', 'main'])"`,
  ],
  // The child's branch stays on its own history (issue 19): the guard's claim is checked before, the effect after.
  ['reset the own branch onto the sibling’s branch', 'git reset --quiet --hard orchard/s1/work'],
  ['rebase the own branch onto the sibling’s branch', 'git rebase --quiet orchard/s1/work'],
  ['a rebase whose exec line resets onto the sibling’s branch', 'git rebase --quiet -x "git reset --quiet --hard orchard/s1/work" HEAD~1'],
  ['python resets the own branch onto the sibling’s branch', `python3 -c "import subprocess; subprocess.run(['git', 'reset', '--hard', 'orchard/s1/work'])"`],
  ['an interactive rebase that rewrites the commits below the base', 'GIT_SEQUENCE_EDITOR=true git rebase --quiet --no-ff -i --root'],
  // The shared object store (issue 19): read-only to the child; its new objects go to its quarantine.
  ['delete shared objects found at run time', 'for o in $(find {common}/objects -type f | head -20); do rm -f "$o"; done'],
  ['truncate every shared pack', 'for p in {common}/objects/pack/*; do : > "$p"; done'],
  ['git prune --expire=now drops unreachable shared objects', 'git prune --expire=now'],
  ['git repack -a -d -f rewrites the shared store', 'git repack -a -d -f -q'],
  ['unset the quarantine, then write an object', 'env -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES git hash-object -w README.md'],
  // Links and file-descriptor tricks.
  ['symlink to the main checkout, written through', 'ln -s {main}/README.md link && echo pwned > link'],
  ['relative symlink out of the worktree, written through', 'ln -s ../../repo/README.md y && echo pwned > y'],
  ['hard link to the main checkout, written through', 'ln {main}/README.md hard && echo pwned >> hard'],
  ['cp -l of the shared config', 'cp -l {common}/config cfg && echo pwned >> cfg'],
  ['/proc/self/fd of a read-only descriptor', 'exec 3< {main}/README.md && echo pwned > /proc/self/fd/3'],
  ['/proc/self/root and /proc/self/cwd paths', 'echo pwned > /proc/self/root{main}/README.md; echo pwned > /proc/self/cwd/../../repo/README.md'],
  // Git under another name, PATH and start-up files.
  ['a copy of git under another name', 'cp "$(command -v git)" /tmp/tig && /tmp/tig update-ref refs/heads/main HEAD'],
  ['a symlink to git under another name', 'ln -s "$(command -v git)" g && ./g branch -f other HEAD'],
  [
    'a PATH entry in the worktree shadowing git',
    "mkdir -p bin && printf '#!/bin/sh\\necho pwned > {main}/README.md\\n' > bin/git && chmod +x bin/git && PATH=$PWD/bin:$PATH git status",
  ],
  ['BASH_ENV naming a script in the worktree', "echo 'echo pwned > {main}/README.md' > env.sh && BASH_ENV=$PWD/env.sh bash -c true"],
  // Interpreters and tools that write to a path of their own.
  ['python3 writes into the main checkout', `python3 -c "open('{main}/README.md', 'w').write('pwned')"`],
  ['perl writes into the main checkout', `perl -e 'open(my $f, ">", "{main}/README.md") or die $!; print $f "pwned"'`],
  [
    'patch -d into the main checkout',
    "printf -- '--- a/README.md\\n+++ b/README.md\\n@@ -1 +1 @@\\n-# demo\\n+pwned\\n' > p.diff && patch -d {main} -p1 < p.diff",
  ],
  ['tar -C into the main checkout', 'echo pwned > README.md && tar -cf /tmp/t.tar README.md && tar -C {main} -xf /tmp/t.tar'],
  ['cp -t into the main checkout', 'cp -t {main} c1.txt'],
  ['tee into the main checkout', 'echo pwned | tee {main}/README.md'],
  ['dd of= into the main checkout', 'echo pwned | dd of={main}/README.md'],
  // Homes and the installation.
  ['write ~/.gitconfig', "printf '[core]\\n\\thooksPath = /tmp\\n' > $HOME/.gitconfig"],
  ['append to ~/.bashrc', 'echo pwned >> $HOME/.bashrc'],
  ['write the worker HOME (hidden)', 'echo pwned > {workerHome}/.git-credentials'],
  ['write /root and ~root', 'echo pwned > /root/{marker}; echo pwned > ~root/{marker}'],
  ['write the project’s own installation', 'touch {install}/.sandbox-pwned; touch {install}/{marker}'],
  ['write the project’s main checkout', 'touch {project}/{marker}'],
  // Undoing the mounts.
  ['remount / read-write', 'mount -o remount,rw / ; echo pwned > {main}/README.md'],
  ['unmount the read-only shared repository', 'umount -l {common} ; echo pwned >> {common}/config'],
  ['a new user namespace to regain mount rights', "unshare -rm sh -c 'umount -l {common}; echo pwned >> {common}/config'"],
];

/** The outcome of one command: its exit status and output. */
export interface CommandResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface Benign {
  command: string;
  /** Runs on the host before the command (e.g. moves the remote). */
  setup?: (f: Fixture) => void;
  /**
   * Set when the layers get this ordinary work wrong today: why. The suites register it as a known failure
   * (ava's `failing`), which turns into a failure of its own once it passes.
   */
  knownGap?: string;
  /**
   * Work the sandbox allows but the guard refuses by policy (its reason code): integration (rebase, merge) is the
   * orchestrator's job, and a session works on its one branch. Through `orchard exec` it must be refused with this
   * reason and change nothing.
   */
  guardPolicy?: string;
  /** `again` runs a further command the same way (the same fixture). */
  check: (t: ExecutionContext, f: Fixture, r: CommandResult, again: (command: string) => Promise<CommandResult>) => void | Promise<void>;
}

/** Commits on the child's branch from the host, each writing its subject into c1.txt. */
function ownCommits(f: Fixture, subjects: readonly string[]): void {
  for (const subject of subjects) {
    writeFileSync(path.join(f.child, 'c1.txt'), `${subject}\n`);
    git(f.child, 'commit', '--quiet', '-am', subject);
  }
}

/**
 * Ordinary work of a child, each with its effect checked; the runner also checks that nothing outside the
 * allowance changed (a setup may create a clone outside the repository).
 */
export const benign: Array<[string, Benign]> = [
  [
    'edit, add and commit on the own branch',
    {
      command: 'echo more >> c1.txt && git add c1.txt && git commit --quiet -m "more work" && git log -1 --format=%s',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout.trim(), 'more work');
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'more work');
        t.is(git(f.main, 'show', 'orchard/c1/work:c1.txt'), 'c1 work\nmore');
        t.notRegex(r.stderr, /error|fatal/i);
      },
    },
  ],
  [
    'a commit after the ref was packed (its directory deleted by pack-refs)',
    {
      setup: (f) => git(f.main, 'pack-refs', '--all'),
      command: 'echo more >> c1.txt && git commit --quiet -am "after pack"',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'after pack');
      },
    },
  ],
  [
    'git status, log and diff read everything',
    {
      command: 'echo change >> c1.txt && git status --short && git diff --stat && git log --oneline main..HEAD && git log --oneline -1 other',
      check: (t, _f, r) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stdout, /^ M c1\.txt$/m);
        t.regex(r.stdout, /c1\.txt \| 1 \+/);
        t.regex(r.stdout, /c1 work/);
        t.regex(r.stdout, /initial/);
      },
    },
  ],
  [
    'reset and rebase onto a moved main (ORIG_HEAD and rebase state in the own admin dir)',
    {
      guardPolicy: 'integration_policy',
      setup: (f) => {
        writeFileSync(path.join(f.main, 'NEWS.md'), 'news\n');
        git(f.main, 'add', 'NEWS.md');
        git(f.main, 'commit', '--quiet', '-m', 'news on main');
      },
      command: 'git rebase --quiet main && git log --format=%s -2 && git reset --quiet --hard HEAD~1 && git rev-parse ORIG_HEAD',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stdout, /c1 work\nnews on main/);
        t.is(git(f.main, 'rev-parse', 'orchard/c1/work'), git(f.main, 'rev-parse', 'main'));
      },
    },
  ],
  [
    'rebase of the own branch onto a moved main',
    {
      guardPolicy: 'integration_policy',
      setup: (f) => {
        writeFileSync(path.join(f.main, 'NEWS.md'), 'news\n');
        git(f.main, 'add', 'NEWS.md');
        git(f.main, 'commit', '--quiet', '-m', 'news on main');
      },
      command: 'git rebase --quiet main',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(git(f.main, 'rev-parse', 'orchard/c1/work~1'), git(f.main, 'rev-parse', 'main'));
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'c1 work');
        t.is(readFileSync(path.join(f.child, 'NEWS.md'), 'utf8'), 'news\n');
        t.is(git(f.child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
      },
    },
  ],
  [
    'squash the own commits with an interactive rebase: HEAD back on the branch, main untouched',
    {
      setup: (f) => ownCommits(f, ['one', 'two']),
      command: 'GIT_SEQUENCE_EDITOR="sed -i 2s/^pick/fixup/" git rebase --quiet -i HEAD~2 && git log --format=%s -3',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'one\nc1 work\ninitial\n');
        t.is(readFileSync(path.join(f.child, 'c1.txt'), 'utf8'), 'two\n');
        t.is(git(f.child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
        t.notRegex(r.stderr, /fatal/);
      },
    },
  ],
  [
    'undo the last commit with reset --soft and commit again',
    {
      command: 'git reset --soft HEAD~1 && git commit --quiet -m "c1 work, again" && git log --format=%s -2',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'c1 work, again\ninitial\n');
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'c1 work, again');
      },
    },
  ],
  [
    'an own rebase stops on a conflict (HEAD detached between commands), is resolved and continued',
    {
      setup: (f) => ownCommits(f, ['one', 'two']),
      // Dropping `one` makes `two` (one → two) conflict.
      command: 'GIT_SEQUENCE_EDITOR="sed -i 1d" git rebase --quiet -i HEAD~2',
      check: async (t, f, r, again) => {
        t.is(r.status, 1, r.stderr);
        t.regex(r.stderr, /could not apply/);
        t.regex(readFileSync(path.join(f.admin, 'HEAD'), 'utf8'), /^[0-9a-f]{40}\n$/, 'detached while the rebase is in progress');
        const next = await again('echo two > c1.txt && git add c1.txt && GIT_EDITOR=true git rebase --continue && git log --format=%s -2');
        t.is(next.status, 0, next.stderr);
        t.regex(next.stdout, /two\nc1 work\n$/);
        t.is(git(f.child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'two');
      },
    },
  ],
  [
    'a checkout of the own branch by name',
    {
      command: 'git checkout orchard/c1/work && git switch orchard/c1/work',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stderr, /Already on 'orchard\/c1\/work'/);
        t.is(git(f.child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
      },
    },
  ],
  [
    'reset onto the sibling’s branch is refused before it runs',
    {
      guardPolicy: 'integration_policy',
      command: 'git reset --hard orchard/s1/work',
      check: () => undefined,
    },
  ],
  [
    'a further branch inside the session directory',
    {
      guardPolicy: 'moves_other_ref',
      command: 'git branch orchard/c1/scratch && git branch --list "orchard/c1/*"',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(git(f.main, 'rev-parse', 'orchard/c1/scratch'), git(f.main, 'rev-parse', 'orchard/c1/work'));
      },
    },
  ],
  [
    'switch to a new branch inside the session directory, commit there, switch back',
    {
      guardPolicy: 'switches_branch',
      command:
        'git switch --quiet -c orchard/c1/scratch && echo s > s.txt && git add s.txt && git commit --quiet -m scratch && git switch --quiet orchard/c1/work',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(git(f.main, 'log', '-1', '--format=%s', 'orchard/c1/scratch'), 'scratch');
        t.is(git(f.main, 'rev-parse', 'orchard/c1/scratch~1'), git(f.main, 'rev-parse', 'orchard/c1/work'));
        t.is(git(f.child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
      },
    },
  ],
  [
    'git push origin HEAD updates the own branch on the bare remote',
    {
      command: 'git commit --quiet --allow-empty -m pushed && git push --quiet origin HEAD',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        const tip = git(f.main, 'rev-parse', 'orchard/c1/work');
        t.is(git(f.remote, 'rev-parse', 'refs/heads/orchard/c1/work'), tip);
        t.is(git(f.remote, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'pushed');
        t.is(git(f.main, 'rev-parse', 'refs/remotes/origin/orchard/c1/work'), tip);
      },
    },
  ],
  [
    'fetch of the own branch from the bare remote updates its remote-tracking ref',
    {
      setup: (f) => {
        // Someone else pushed to the session's branch on the remote.
        const other = path.join(f.base, 'other-clone');
        git(f.base, 'clone', '--quiet', f.remote, other);
        git(other, 'checkout', '--quiet', '-b', 'x');
        writeFileSync(path.join(other, 'remote.txt'), 'from elsewhere\n');
        git(other, 'add', '.');
        git(other, 'commit', '--quiet', '-m', 'remote work');
        git(other, 'push', '--quiet', '--force', 'origin', 'HEAD:refs/heads/orchard/c1/work');
      },
      command: 'git fetch --quiet origin orchard/c1/work && git log -1 --format=%s origin/orchard/c1/work && git log -1 --format=%s FETCH_HEAD',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'remote work\nremote work\n');
        t.is(git(f.main, 'log', '-1', '--format=%s', 'refs/remotes/origin/orchard/c1/work'), 'remote work');
      },
    },
  ],
  [
    'fetch that would move another remote-tracking ref fails and moves nothing',
    {
      setup: (f) => {
        const other = path.join(f.base, 'other-clone');
        git(f.base, 'clone', '--quiet', f.remote, other);
        git(other, 'commit', '--quiet', '--allow-empty', '-m', 'main moved on the remote');
        git(other, 'push', '--quiet', 'origin', 'main');
      },
      command: 'git fetch origin main',
      check: (t, f, r) => {
        t.not(r.status, 0);
        t.regex(r.stderr, /Read-only file system/);
        t.is(git(f.main, 'log', '-1', '--format=%s', 'origin/main'), 'initial');
      },
    },
  ],
  [
    'git stash list reads the shared stash',
    {
      command: 'git stash list --format=%gs',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout.trim(), git(f.main, 'stash', 'list', '--format=%gs'));
        t.regex(r.stdout, /^WIP on main: /);
      },
    },
  ],
  [
    'node writes a file in the worktree',
    {
      command: `node -e "require('fs').writeFileSync('gen.txt', String(6 * 7))"`,
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(readFileSync(path.join(f.child, 'gen.txt'), 'utf8'), '42');
      },
    },
  ],
  [
    'make with a tiny Makefile builds into the worktree',
    {
      command: "printf 'out/hello.txt: c1.txt\\n\\tmkdir -p out && tr a-z A-Z < c1.txt > $@\\n' > Makefile && make --no-print-directory",
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(readFileSync(path.join(f.child, 'out', 'hello.txt'), 'utf8'), 'C1 WORK\n');
      },
    },
  ],
  [
    'a shell loop writes files in the worktree',
    {
      command: 'mkdir -p gen && for i in 1 2 3; do echo "line $i" > gen/$i.txt; done && ls gen',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, '1.txt\n2.txt\n3.txt\n');
        for (const i of [1, 2, 3]) t.is(readFileSync(path.join(f.child, 'gen', `${i}.txt`), 'utf8'), `line ${i}\n`);
      },
    },
  ],
  [
    'mktemp and a build under /tmp, kept for the next command in the private tmp',
    {
      command: 'f=$(mktemp) && echo hi > "$f" && mkdir -p /tmp/build && cp "$f" /tmp/build/out && echo "$TMPDIR $f"',
      check: async (t, f, r, again) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stdout, /^\/tmp \/tmp\/tmp\.\w+\n$/);
        t.is(readFileSync(path.join(f.layout.tmpDir, 'build', 'out'), 'utf8'), 'hi\n');
        const next = await again('cat /tmp/build/out /var/tmp/build/out');
        t.is(next.stdout, 'hi\nhi\n');
      },
    },
  ],
  [
    'writes to $TMPDIR land in the private tmp',
    {
      command: 'echo kept > "$TMPDIR/kept.txt" && cat "$TMPDIR/kept.txt"',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'kept\n');
        t.is(readFileSync(path.join(f.layout.tmpDir, 'kept.txt'), 'utf8'), 'kept\n');
      },
    },
  ],
  [
    'a shell loop writes a file in the worktree (a literal target)',
    {
      command: 'mkdir -p gen && for i in 1 2 3; do echo "line $i"; done > gen/all.txt && cat gen/all.txt',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(readFileSync(path.join(f.child, 'gen', 'all.txt'), 'utf8'), 'line 1\nline 2\nline 3\n');
      },
    },
  ],
  [
    'a write to /tmp by name lands in the private tmp',
    {
      command: 'echo kept > /tmp/kept.txt && cat /tmp/kept.txt',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'kept\n');
        t.is(readFileSync(path.join(f.layout.tmpDir, 'kept.txt'), 'utf8'), 'kept\n');
      },
    },
  ],
  [
    'no start-up file runs, even with stdin a socket (Node pipes) and no SHLVL',
    {
      setup: (f) => writeFileSync(path.join(f.home, '.bashrc'), 'echo rc-ran\n'),
      command: 'echo command-ran',
      check: (t, _f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, 'command-ran\n');
      },
    },
  ],
  [
    'HOME is the session HOME, readable',
    {
      command: 'echo "$HOME" && cat ~/.bashrc',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(r.stdout, `${f.home}\n# session rc\n`);
      },
    },
  ],
];
