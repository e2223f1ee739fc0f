import test, { type ExecutionContext } from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import * as path from 'node:path';
import { buildCommandEnv } from '../../activities/bash/env';
import {
  buildSandboxArgv,
  confinedSessionBranch,
  migrateSessionBranch,
  prepareSandboxDirs,
  resolveSandboxLayout,
  sandboxAvailable,
  sandboxLayoutProblem,
  type SandboxLayout,
} from '../../activities/bash/sandbox';
import { isolatedBranch, markWorktreeIsolated } from '../../activities/git/backstop';
import { GIT_TEST_ENV, gitIn, gitIn as git } from '../helpers/git';

/**
 * Layer 2 by effect (docs/confinement.md): attack commands run through the sandbox must leave everything outside
 * the child's allowance byte-for-byte as it was; ordinary work must succeed and have its effect. The fixture has
 * no ref backstop hook, so what is stopped here is stopped by the mount namespace alone.
 *
 * bwrap is required. `.ci/run` installs it; where it could not, it sets ORCHARD_TEST_NO_SANDBOX to the reason and
 * these tests are skipped saying so. Anywhere else a missing or broken bwrap fails every test with the probe's
 * reason.
 */

const INSTALL = path.resolve(__dirname, '..', '..');
const noSandbox = process.env.ORCHARD_TEST_NO_SANDBOX;
/**
 * Where fixtures live. Outside /tmp (as in production, `<state dir>/worktrees`) the main checkout and the sibling
 * are visible read-only in the sandbox; under /tmp they are hidden by the private /tmp and only the shared
 * repository is shown again. Attacks run in both.
 */
const underPrivateTmp = (dir: string) => ['/tmp', '/var/tmp', '/dev/shm', tmpdir()].some((t) => dir === t || dir.startsWith(`${t}/`));
// A checkout under /tmp (a CI clone there) cannot hold the "outside" fixtures: the sandbox's private /tmp hides them.
const OUTSIDE = underPrivateTmp(INSTALL) ? path.join(homedir(), '.cache', 'orchard', 'sandbox-test') : path.join(INSTALL, '.test-tmp');
const ROOTS: ReadonlyArray<readonly [string, string]> = [
  ['outside /tmp', OUTSIDE],
  ['under /tmp', tmpdir()],
];
let probeProblem: string | undefined;

test.before(async () => {
  if (noSandbox) return;
  const probe = await sandboxAvailable();
  if (!probe.ok) probeProblem = probe.reason;
});

const created: string[] = [];
test.after.always(() => created.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

interface Fixture {
  base: string;
  main: string;
  common: string;
  sib: string;
  sibAdmin: string;
  child: string;
  remote: string;
  home: string;
  workerHome: string;
  layout: SandboxLayout;
  env: Record<string, string>;
}

const templates = new Map<string, string>();

function buildRepositories(base: string): void {
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
  writeFileSync(path.join(main, 'README.md'), '# demo\nstashed\n');
  git(main, 'stash', '--quiet');
  writeFileSync(path.join(main, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  for (const id of ['s1', 'c1']) {
    const wt = path.join(base, 'worktrees', id);
    git(main, 'worktree', 'add', '--quiet', '-b', confinedSessionBranch(id), wt);
    writeFileSync(path.join(wt, `${id}.txt`), `${id} work\n`);
    git(wt, 'add', '.');
    git(wt, 'commit', '--quiet', '-m', `${id} work`);
  }
}

/**
 * A shared repository: the main checkout on `main` (plus branch `other`, tag `v1`, a stash), a bare remote
 * `origin`, a sibling session's worktree on `orchard/s1/work`, and the child's worktree on `orchard/c1/work`,
 * each one commit ahead. The session HOME and a fake worker HOME with a credential sit beside them.
 */
async function fixture(root: string = ROOTS[0][1]): Promise<Fixture> {
  mkdirSync(root, { recursive: true });
  const base = mkdtempSync(path.join(root, 'orchard-sandbox-'));
  created.push(base);
  const remote = path.join(base, 'remote.git');
  const main = path.join(base, 'repo');
  const common = path.join(main, '.git');
  const child = path.join(base, 'worktrees', 'c1');
  const sib = path.join(base, 'worktrees', 's1');
  // Built once per root and copied: git records absolute paths, rewritten here (both links of each worktree).
  let template = templates.get(root);
  if (!template) {
    template = mkdtempSync(path.join(root, 'orchard-sandbox-template-'));
    created.push(template);
    buildRepositories(template);
    templates.set(root, template);
  }
  execFileSync('cp', ['-a', `${template}/.`, base]);
  for (const wt of [sib, child]) {
    const admin = path.join(common, 'worktrees', path.basename(wt));
    writeFileSync(path.join(wt, '.git'), `gitdir: ${admin}\n`);
    writeFileSync(path.join(admin, 'gitdir'), `${path.join(wt, '.git')}\n`);
  }
  git(main, 'remote', 'set-url', 'origin', remote);
  const home = path.join(base, 'worktrees', '.homes', 'c1');
  mkdirSync(home, { recursive: true });
  writeFileSync(path.join(home, '.bashrc'), '# session rc\n');
  const workerHome = path.join(base, 'workerhome');
  mkdirSync(workerHome);
  writeFileSync(path.join(workerHome, '.git-credentials'), 'https://user:secret@example.invalid\n');
  const layout = await resolveSandboxLayout({
    commonDir: common,
    worktree: child,
    branch: confinedSessionBranch('c1'),
    tmpDir: path.join(base, 'private-tmp', 'c1'),
    home,
    hide: [workerHome],
  });
  const env = buildCommandEnv({
    worktree: child,
    sessionId: 'c1',
    branch: layout.branch,
    from: { PATH: process.env.PATH },
  });
  const sibAdmin = path.join(common, 'worktrees', 's1');
  return { base, main, common, sib, sibAdmin, child, remote, home, workerHome, layout, env };
}

function sandboxed(f: Fixture, command: string) {
  const argv = buildSandboxArgv(f.layout, command);
  const r = spawnSync(argv[0], argv.slice(1), { env: f.env, encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `{main}`-style placeholders in a command, so the table reads like the shell an agent would type. */
function fill(f: Fixture, command: string, marker: string): string {
  const values: Record<string, string> = {
    main: f.main,
    common: f.common,
    sib: f.sib,
    sibAdmin: f.sibAdmin,
    remote: f.remote,
    workerHome: f.workerHome,
    install: INSTALL,
    marker,
  };
  return command.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}

/** The child's allowance, relative to the fixture base: everything else is compared. */
function allowance(f: Fixture): string[] {
  const rel = (p: string) => path.relative(f.base, p);
  return [
    rel(f.child),
    rel(f.layout.adminDir),
    rel(path.join(f.common, 'objects')),
    rel(path.join(f.common, 'refs/heads/orchard/c1')),
    rel(path.join(f.common, 'logs/refs/heads/orchard/c1')),
    rel(path.join(f.common, 'refs/remotes/origin/orchard/c1')),
    rel(path.join(f.common, 'logs/refs/remotes/origin/orchard/c1')),
    rel(f.layout.tmpDir),
  ];
}

/** Every file, link and directory outside the allowance: type, mode and content hash (or link target). */
function files(f: Fixture): Record<string, string> {
  const skip = new Set(allowance(f));
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    if (skip.has(rel)) return;
    const abs = path.join(f.base, rel);
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

/** What git says about shared state: refs but the child's own, every HEAD, the stash, the worktree list. */
function gitState(f: Fixture): Record<string, string> {
  // A broken repository is a difference to report, not a crash of the snapshot.
  const git = (cwd: string, ...args: string[]) => {
    try {
      return gitIn(cwd, ...args);
    } catch (err) {
      return `failed: ${(err as Error).message.split('\n').slice(0, 2).join(' ')}`;
    }
  };
  const own = /^refs\/(heads|remotes\/[^/]+)\/orchard\/c1\//;
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
    remoteRefs: git(f.remote, 'for-each-ref', '--format=%(refname) %(objectname)'),
    config: git(f.main, 'config', '--list', '--local'),
  };
}

function snapshot(f: Fixture) {
  return { files: files(f), git: gitState(f) };
}

/** Registers `title` so that a missing sandbox fails it loudly, or skips it where CI said it could not install bwrap. */
function sandboxTest(title: string, body: (t: ExecutionContext) => Promise<void>) {
  if (noSandbox) {
    test.skip(`${title} — skipped: ${noSandbox}`, () => undefined);
    return;
  }
  test.serial(title, async (t) => {
    if (probeProblem) {
      t.fail(
        `the sandbox is unavailable: ${probeProblem}. ` +
          'Install bubblewrap (apt-get install bubblewrap), or set ORCHARD_TEST_NO_SANDBOX=<why> to skip',
      );
      return;
    }
    await body(t);
  });
}
if (noSandbox) console.log(`sandbox tests skipped: ${noSandbox}`);

const attacks: Array<[string, string]> = [
  ['write into the main checkout', 'echo pwned > {main}/README.md'],
  ['create a file in the main checkout', 'touch {main}/planted.txt'],
  ['node writes into the main checkout', `node -e "require('fs').writeFileSync('{main}/README.md', 'pwned')"`],
  ['write into the sibling worktree', 'echo pwned > {sib}/s1.txt'],
  ['copy into the sibling worktree', 'cp -r . {sib}/copy'],
  ['point the sibling’s HEAD at main', "echo 'ref: refs/heads/main' > {sibAdmin}/HEAD"],
  ['truncate the sibling’s index', ': > {sibAdmin}/index'],
  ['plant a hook', "printf '#!/bin/sh\\necho pwned\\n' > {common}/hooks/post-checkout && chmod +x {common}/hooks/post-checkout"],
  ['overwrite a hook', 'echo pwned >> {common}/hooks/pre-commit'],
  ['git config writes the shared config', 'git config core.hooksPath /tmp/hooks'],
  ['append to the shared config', "printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' >> {common}/config"],
  ['write info/exclude', 'echo "*" >> {common}/info/exclude'],
  ['write packed-refs', 'echo "0000000000000000000000000000000000000000 refs/heads/main" >> {common}/packed-refs'],
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
  ['push into another branch of the same repository', 'git push . HEAD:other'],
  ['fetch into another branch', 'git fetch . HEAD:refs/heads/other'],
  ['push main to the bare remote', 'git push origin HEAD:main'],
  ['worktree add', 'git worktree add ../evil'],
  ['worktree remove of the sibling', 'git worktree remove --force {sib}'],
  ['worktree prune', 'rm -rf {sib} ; git worktree prune'],
  ['pack-refs', 'git pack-refs --all'],
  ['gc', 'git gc --quiet'],
  ['reflog expire for all worktrees', 'git reflog expire --expire=now --all'],
  ['write ~/.gitconfig', "printf '[core]\\n\\thooksPath = /tmp\\n' > $HOME/.gitconfig"],
  ['append to ~/.bashrc', 'echo pwned >> $HOME/.bashrc'],
  ['symlink to the main checkout, written through', 'ln -s {main}/README.md link && echo pwned > link'],
  ['hard link to the main checkout, written through', 'ln {main}/README.md hard && echo pwned >> hard'],
  ['cp -l of the shared config', 'cp -l {common}/config cfg && echo pwned >> cfg'],
  ['replace the worktree .git with the shared repository', 'echo "gitdir: {common}" > .git && git update-ref refs/heads/main HEAD'],
  ['write the project’s own installation', 'touch {install}/.sandbox-pwned'],
  ['write the worker HOME (hidden)', 'echo pwned > {workerHome}/.git-credentials'],
  ['remount / read-write', 'mount -o remount,rw / ; echo pwned > {main}/README.md'],
  ['unmount the read-only shared repository', 'umount -l {common} ; echo pwned >> {common}/config'],
  ['a new user namespace to regain mount rights', "unshare -rm sh -c 'umount -l {common}; echo pwned >> {common}/config'"],
];

for (const [where, root] of ROOTS) for (const [name, command] of attacks) {
  sandboxTest(`attack (${where}): ${name} changes nothing outside the allowance`, async (t) => {
    const f = await fixture(root);
    await prepareSandboxDirs(f.layout);
    const marker = `orchard-sandbox-${process.pid}-${Math.random().toString(36).slice(2)}`;
    const before = snapshot(f);
    const r = sandboxed(f, fill(f, command, marker));
    t.log(`exit ${r.status}: ${r.stderr.trim().split('\n').slice(-2).join(' | ')}`);
    const after = snapshot(f);
    t.deepEqual(after.git, before.git);
    t.deepEqual(after.files, before.files);
    t.false(existsSync(path.join(INSTALL, '.sandbox-pwned')));
  });
}

sandboxTest('attack: /tmp, /var/tmp and /dev/shm writes stay private', async (t) => {
  const f = await fixture();
  await prepareSandboxDirs(f.layout);
  const marker = `orchard-sandbox-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const r = sandboxed(f, `echo a > /tmp/${marker} && echo b > /var/tmp/${marker}.v && (echo c > /dev/shm/${marker} || true)`);
  t.is(r.status, 0, r.stderr);
  for (const p of [`/tmp/${marker}`, `/var/tmp/${marker}.v`, `/dev/shm/${marker}`]) t.false(existsSync(p), p);
  t.is(readFileSync(path.join(f.layout.tmpDir, marker), 'utf8'), 'a\n');
});

sandboxTest('a hidden path is empty and its secrets are unreadable', async (t) => {
  const f = await fixture();
  await prepareSandboxDirs(f.layout);
  const r = sandboxed(f, fill(f, 'ls -A {workerHome} | wc -l; cat {workerHome}/.git-credentials', ''));
  t.not(r.status, 0);
  t.is(r.stdout.trim(), '0');
  t.notRegex(r.stdout, /secret/);
});

interface Benign {
  command: string;
  /** Runs on the host before the command (e.g. moves the remote). */
  setup?: (f: Fixture) => void;
  check: (t: ExecutionContext, f: Fixture, r: { status: number | null; stdout: string; stderr: string }) => void;
}

const benign: Array<[string, Benign]> = [
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
    'git log and git diff read everything',
    {
      command: 'echo change >> c1.txt && git diff --stat && git log --oneline main..HEAD && git log --oneline -1 other',
      check: (t, _f, r) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stdout, /c1\.txt \| 1 \+/);
        t.regex(r.stdout, /c1 work/);
        t.regex(r.stdout, /initial/);
      },
    },
  ],
  [
    'reset and rebase onto a moved main (ORIG_HEAD and rebase state in the own admin dir)',
    {
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
    'a further branch inside the session directory',
    {
      command: 'git branch orchard/c1/scratch && git branch --list "orchard/c1/*"',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.is(git(f.main, 'rev-parse', 'orchard/c1/scratch'), git(f.main, 'rev-parse', 'orchard/c1/work'));
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
        git(other, 'push', '--quiet', 'origin', 'HEAD:refs/heads/orchard/c1/work');
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
    'git stash is refused (the stash is shared) and the work stays in the worktree',
    {
      command: 'echo dirty >> c1.txt && git stash; git diff --stat',
      check: (t, f, r) => {
        t.regex(r.stderr, /Read-only file system|Cannot save/);
        t.regex(r.stdout, /c1\.txt \| 1 \+/);
        t.is(readFileSync(path.join(f.child, 'c1.txt'), 'utf8'), 'c1 work\ndirty\n');
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
    'mktemp and a build under /tmp, kept for the next command in the private tmp',
    {
      command: 'f=$(mktemp) && echo hi > "$f" && mkdir -p /tmp/build && cp "$f" /tmp/build/out && echo "$TMPDIR $f"',
      check: (t, f, r) => {
        t.is(r.status, 0, r.stderr);
        t.regex(r.stdout, /^\/tmp \/tmp\/tmp\.\w+\n$/);
        t.is(readFileSync(path.join(f.layout.tmpDir, 'build', 'out'), 'utf8'), 'hi\n');
        const again = sandboxed(f, 'cat /tmp/build/out /var/tmp/build/out');
        t.is(again.stdout, 'hi\nhi\n');
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

for (const [name, c] of benign) {
  sandboxTest(`benign: ${name}`, async (t) => {
    const f = await fixture();
    c.setup?.(f);
    await prepareSandboxDirs(f.layout);
    const before = snapshot(f);
    const r = sandboxed(f, c.command);
    c.check(t, f, r);
    const after = snapshot(f);
    // Setups may create a clone; the shared state itself must not change.
    t.deepEqual(after.git, before.git);
    t.deepEqual(after.files, before.files);
  });
}

sandboxTest('the objects the child wrote are in the shared store: the main checkout can merge its branch', async (t) => {
  const f = await fixture();
  await prepareSandboxDirs(f.layout);
  const r = sandboxed(f, 'echo merged > m.txt && git add m.txt && git commit --quiet -m m');
  t.is(r.status, 0, r.stderr);
  git(f.main, 'merge', '--quiet', '--no-edit', 'orchard/c1/work');
  t.is(readFileSync(path.join(f.main, 'm.txt'), 'utf8'), 'merged\n');
});

test.failing('known gap: the writable object store lets the child delete objects (see docs/confinement.md)', async (t) => {
  if (noSandbox || probeProblem) return t.fail('no sandbox');
  const f = await fixture();
  await prepareSandboxDirs(f.layout);
  const before = git(f.main, 'count-objects', '-v');
  sandboxed(f, fill(f, 'rm -rf {common}/objects/??', ''));
  t.is(git(f.main, 'count-objects', '-v'), before);
});

sandboxTest('the probe reports ok with the bwrap version', async (t) => {
  const probe = await sandboxAvailable();
  t.true(probe.ok);
  if (probe.ok) t.regex(probe.version, /^bubblewrap \d/);
});

test('the probe says why when bwrap is missing or not a sandbox', async (t) => {
  const missing = await sandboxAvailable({ bwrap: path.join(tmpdir(), 'no-such-bwrap') });
  t.false(missing.ok);
  if (!missing.ok) t.regex(missing.reason, /no-such-bwrap --version failed: .*ENOENT/);
  // A "bwrap" that runs the command unconfined must be caught by the probe's effect checks.
  const dir = mkdtempSync(path.join(tmpdir(), 'orchard-fake-bwrap-'));
  created.push(dir);
  const fake = path.join(dir, 'bwrap');
  writeFileSync(
    fake,
    [
      '#!/bin/bash',
      '[ "$1" = --version ] && { echo "bubblewrap 0.0"; exit 0; }',
      'while [ "$1" != -- ]; do [ "$1" = --chdir ] && cd "$2"; shift; done; shift; exec "$@"',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  const fakeProbe = await sandboxAvailable({ bwrap: fake });
  t.false(fakeProbe.ok);
  if (!fakeProbe.ok) t.regex(fakeProbe.reason, /shared repository is writable|capabilities|private/);
});

test('layouts that cannot be confined are refused with the reason', (t) => {
  const good: SandboxLayout = {
    commonDir: '/srv/repo/.git',
    worktree: '/srv/wt/c1',
    adminDir: '/srv/repo/.git/worktrees/c1',
    branch: 'orchard/c1/work',
    tmpDir: '/srv/tmp/c1',
  };
  t.is(sandboxLayoutProblem(good), undefined);
  const cases: Array<[string, Partial<SandboxLayout>, RegExp]> = [
    ['the legacy branch (a plain file)', { branch: 'orchard/c1' }, /ref directory of its own/],
    ['a branch outside orchard/', { branch: 'feature/c1/work' }, /ref directory of its own/],
    ['a nested branch', { branch: 'orchard/c1/a/b' }, /ref directory of its own/],
    ['an admin dir elsewhere', { adminDir: '/srv/repo/.git' }, /not a directory directly under/],
    ['a relative worktree', { worktree: 'wt/c1' }, /worktree must be a normalised absolute path/],
    ['the worktree containing the repository', { worktree: '/srv' }, /overlaps the shared repository/],
    ['the tmp dir inside the worktree', { tmpDir: '/srv/wt/c1/tmp' }, /overlaps the worktree/],
    ['a remote with a slash', { remotes: ['a/b'] }, /remote name/],
  ];
  for (const [name, change, expected] of cases) t.regex(sandboxLayoutProblem({ ...good, ...change }) ?? '', expected, name);
  t.throws(() => buildSandboxArgv({ ...good, branch: 'orchard/c1' }, 'true'), { message: /ref directory of its own/ });
});

test('resolveSandboxLayout believes a worktree’s .git only when its admin dir points back', async (t) => {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-sandbox-resolve-'));
  created.push(base);
  const main = path.join(base, 'repo');
  git(base, 'init', '--quiet', '-b', 'main', main);
  git(main, 'commit', '--quiet', '--allow-empty', '-m', 'initial');
  for (const id of ['c1', 's1']) git(main, 'worktree', 'add', '--quiet', '-b', confinedSessionBranch(id), path.join(base, id));
  const input = {
    commonDir: path.join(main, '.git'),
    worktree: path.join(base, 'c1'),
    branch: 'orchard/c1/work',
    tmpDir: path.join(base, 'tmp'),
  };
  const layout = await resolveSandboxLayout({ ...input, remotes: [] });
  t.is(layout.adminDir, path.join(main, '.git', 'worktrees', 'c1'));
  // The child claims the sibling's admin dir, then the common dir itself: both refused.
  writeFileSync(path.join(base, 'c1', '.git'), `gitdir: ${path.join(main, '.git', 'worktrees', 's1')}\n`);
  await t.throwsAsync(resolveSandboxLayout(input), { message: /not a linked worktree of/ });
  writeFileSync(path.join(base, 'c1', '.git'), `gitdir: ${path.join(main, '.git')}\n`);
  await t.throwsAsync(resolveSandboxLayout(input), { message: /not a linked worktree of/ });
});

test('migrateSessionBranch moves orchard/<id> to orchard/<id>/work with its reflog, HEAD, marker and tracking ref', async (t) => {
  const base = mkdtempSync(path.join(tmpdir(), 'orchard-sandbox-migrate-'));
  created.push(base);
  const remote = path.join(base, 'remote.git');
  const main = path.join(base, 'repo');
  const child = path.join(base, 'c1');
  git(base, 'init', '--quiet', '--bare', remote);
  git(base, 'init', '--quiet', '-b', 'main', main);
  git(main, 'commit', '--quiet', '--allow-empty', '-m', 'initial');
  git(main, 'remote', 'add', 'origin', remote);
  git(main, 'worktree', 'add', '--quiet', '-b', 'orchard/c1', child);
  await markWorktreeIsolated(child, 'orchard/c1');
  git(child, 'commit', '--quiet', '--allow-empty', '-m', 'child work');
  git(child, 'push', '--quiet', '-u', 'origin', 'orchard/c1');
  const tip = git(main, 'rev-parse', 'orchard/c1');
  const reflog = git(main, 'reflog', 'show', '--format=%H', 'orchard/c1');

  const result = await migrateSessionBranch(main, 'c1');
  t.deepEqual(result, { from: 'orchard/c1', to: 'orchard/c1/work', migrated: true });
  t.is(git(main, 'rev-parse', 'orchard/c1/work'), tip);
  // The old entries are all kept; `branch -m` adds one for the rename.
  t.true(git(main, 'reflog', 'show', '--format=%H', 'orchard/c1/work').endsWith(reflog));
  t.is(git(child, 'symbolic-ref', 'HEAD'), 'refs/heads/orchard/c1/work');
  t.is(git(child, 'status', '--porcelain'), '');
  t.is(await isolatedBranch(child), 'orchard/c1/work');
  t.is(git(main, 'rev-parse', 'refs/remotes/origin/orchard/c1/work'), tip);
  for (const old of ['refs/heads/orchard/c1', 'refs/remotes/origin/orchard/c1']) {
    t.not(spawnSync('git', ['show-ref', '--verify', '--quiet', old], { cwd: main, env: GIT_TEST_ENV }).status, 0, old);
  }
  t.is(git(main, 'config', 'branch.orchard/c1/work.remote'), 'origin');
  t.deepEqual(await migrateSessionBranch(main, 'c1'), { ...result, migrated: false }, 'idempotent');
  t.deepEqual(await migrateSessionBranch(main, 'nobody'), { from: 'orchard/nobody', to: 'orchard/nobody/work', migrated: false });

  if (noSandbox || probeProblem) return;
  // After the migration, the child can commit from inside the sandbox.
  const layout = await resolveSandboxLayout({
    commonDir: path.join(main, '.git'),
    worktree: child,
    branch: result.to,
    tmpDir: path.join(base, 'tmp'),
  });
  await prepareSandboxDirs(layout);
  const argv = buildSandboxArgv(layout, 'git commit --quiet --allow-empty -m confined');
  const r = spawnSync(argv[0], argv.slice(1), { env: GIT_TEST_ENV, encoding: 'utf8' });
  t.is(r.status, 0, r.stderr);
  t.is(git(main, 'log', '-1', '--format=%s', 'orchard/c1/work'), 'confined');
});
