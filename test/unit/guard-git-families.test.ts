import test from 'ava';
import fc from 'fast-check';
import type { Parser } from 'web-tree-sitter';
import { decideCommand, loadBashParser, type GuardDecision, type GuardReason } from '../../activities/bash/guard';
import { decideGit } from '../../activities/bash/guard/git-argv';
import { literalWord } from '../../activities/bash/guard/words';

/**
 * The git families of the confinement issue (deliverable 4) and the git false refusals (deliverable 5), decided by
 * the real parser and guard for a child on `orchard/s1/work` in `/srv/wt/s1`. Each family has a table and a
 * property that varies spelling, quoting, paths and refspecs: a variant whose effective target is outside the
 * child's allowance is never allowed, and the matching variant inside it is.
 */

const BRANCH = 'orchard/s1/work';
const WORKTREE = '/srv/wt/s1';
const context = { branch: BRANCH, worktree: WORKTREE, isolated: true };
let parser: Parser;
test.before(async () => {
  parser = await loadBashParser();
});

const decide = (command: string): GuardDecision => decideCommand(parser, command, context);
const show = (d: GuardDecision) => (d.allowed ? 'allowed' : `refused ${d.reason}: ${d.why}`);

type Row = readonly [command: string, reason: GuardReason];

const ATTACKS: Record<string, readonly Row[]> = {
  'git options that write to a path': [
    ['git diff --output=/work/main/README.md', 'outside_worktree'],
    ['git diff --outp=../s2/README.md', 'outside_worktree'],
    ['git log -p --output /srv/wt/s2/x', 'outside_worktree'],
    ['git show --out=/srv/wt/s1x/y HEAD', 'outside_worktree'],
    ['git diff-tree --output=.git/hooks/pre-commit HEAD', 'git_metadata_write'],
    ['git range-diff --output=../../etc/x a...b', 'outside_worktree'],
    ['git stash show --output=/work/main/x', 'outside_worktree'],
    ['git diff --output="$OUT"', 'dynamic_argument'],
    ['git log --output ~/x', 'dynamic_argument'],
    ['git format-patch -o /work/main HEAD~1', 'outside_worktree'],
    ['git format-patch -o/work/main HEAD~1', 'outside_worktree'],
    ['git format-patch -ko/work/main HEAD~1', 'outside_worktree'],
    ['git format-patch --output-directory ../s2 HEAD~1', 'outside_worktree'],
    ['git format-patch --output-dir=../s2 HEAD~1', 'outside_worktree'],
    ['git format-patch --o=/work/main HEAD~1', 'outside_worktree'],
    ['git archive -o /work/main/a.tar HEAD', 'outside_worktree'],
    ['git archive -vo/work/main/a.tar HEAD', 'outside_worktree'],
    ['git archive --outpu=/work/main/a.tar HEAD', 'outside_worktree'],
    ['git checkout-index -a -f --prefix=../main/', 'outside_worktree'],
    ['git checkout-index -a -f --pref ../main/', 'outside_worktree'],
    ['git read-tree --index-output=/work/main/.git/index HEAD', 'outside_worktree'],
    ['git read-tree --index-o=../s2/.git/index HEAD', 'outside_worktree'],
    ['git read-tree -u --prefix=../main/ HEAD', 'outside_worktree'],
    ['git interpret-trailers --in-place /work/main/msg', 'outside_worktree'],
    ['git interpret-trailers --in-pl --trailer a=b /work/main/msg', 'outside_worktree'],
    ['git interpret-trailers --i ../s2/msg', 'outside_worktree'],
    ['git bundle create /work/main/b HEAD', 'outside_worktree'],
    ['git bundle create --version 3 /work/main/b HEAD', 'outside_worktree'],
    ['git bundle create -q ../s2/b --all', 'outside_worktree'],
    ['git apply --directory=../main fix.patch', 'outside_worktree'],
    ['git apply --dir /work/main fix.patch', 'outside_worktree'],
    ['git -C src apply --directory=../x fix.patch', 'outside_worktree'],
    ['git apply --build-fake-ancestor=/work/main/.git/index fix.patch', 'outside_worktree'],
    ['git apply --unsafe-paths fix.patch', 'outside_worktree'],
    ['git am --directory=../main x.mbox', 'outside_worktree'],
    ['git mailinfo /work/main/msg /work/main/patch', 'outside_worktree'],
    ['git mailsplit -o/work/main x.mbox', 'outside_worktree'],
    ['git merge-file /work/main/a b c', 'outside_worktree'],
    ['git fast-export --export-marks=/work/main/m HEAD', 'outside_worktree'],
  ],
  "refs other than the child's": [
    ['git push origin HEAD:main', 'moves_other_ref'],
    ['git push origin :refs/tags/x', 'moves_other_ref'],
    ['git push origin --tags', 'moves_other_ref'],
    ['git push --follow-t origin HEAD', 'moves_other_ref'],
    ['git push --mirr origin', 'moves_other_ref'],
    ['git push --all origin', 'moves_other_ref'],
    ["git push origin '+refs/*:refs/*'", 'moves_other_ref'],
    ['git push origin HEAD:refs/notes/commits', 'moves_other_ref'],
    ['git push origin orchard/s1/work:refs/tags/orchard/s1/work', 'moves_other_ref'],
    ['git push origin HEAD:orchard/s1/work2', 'moves_other_ref'],
    ['git push origin HEAD:refs/heads/orchard/s2/work', 'moves_other_ref'],
    ['git push origin HEAD:refs/heads/orchard/s1/work/x', 'moves_other_ref'],
    ['git push origin tag v1', 'moves_other_ref'],
    ['git push --recurse-submodules=on-demand origin HEAD', 'moves_other_ref'],
    ['git notes add -m hi HEAD', 'moves_other_ref'],
    ['git notes --ref=orchard/s1/work add -m x', 'moves_other_ref'],
    ['git notes --ref refs/notes/commits append -m x', 'moves_other_ref'],
    ['git notes copy a b', 'moves_other_ref'],
    ['git notes remove HEAD', 'moves_other_ref'],
    ['git tag v1', 'moves_other_ref'],
    ['git tag -a v1 -m hi', 'moves_other_ref'],
    ['git tag -f v1 HEAD', 'moves_other_ref'],
    ['git tag -d v1', 'moves_other_ref'],
    ['git update-ref refs/heads/main HEAD', 'moves_other_ref'],
    ['git update-ref -d refs/heads/x', 'moves_other_ref'],
    ['git symbolic-ref HEAD refs/heads/main', 'moves_other_ref'],
    ['git symbolic-ref main-worktree/HEAD refs/heads/x', 'moves_other_ref'],
    ['git branch -f other HEAD', 'moves_other_ref'],
    ['git branch -m other x', 'moves_other_ref'],
    ['git branch --cop other x', 'moves_other_ref'],
    ['git branch -d other', 'moves_other_ref'],
    ['git branch newbranch', 'moves_other_ref'],
    ['git replace a b', 'moves_other_ref'],
    ['git replace --graft a b', 'moves_other_ref'],
    ['git replace --format=short -d a', 'moves_other_ref'],
  ],
  'fetch that moves tags or writes shallow': [
    ['git fetch --tags', 'moves_other_ref'],
    ['git fetch -t origin', 'moves_other_ref'],
    ['git fetch --ta origin', 'moves_other_ref'],
    ['git fetch --all --tags', 'moves_other_ref'],
    ["git fetch origin 'refs/tags/*:refs/tags/*'", 'moves_other_ref'],
    ['git fetch origin v1:refs/tags/v1', 'moves_other_ref'],
    ['git fetch origin tag v1', 'moves_other_ref'],
    ['git fetch origin main:refs/heads/main', 'moves_other_ref'],
    ['git fetch origin +main:main', 'moves_other_ref'],
    ["git fetch origin 'refs/notes/*:refs/notes/*'", 'moves_other_ref'],
    ['git fetch . HEAD:refs/remotes/origin/main', 'moves_other_ref'],
    ['git fetch origin main:refs/remotes/upstream/main', 'moves_other_ref'],
    ['git fetch origin orchard/s1/work:refs/remotes/origin/main', 'moves_other_ref'],
    ["git fetch origin --refmap='+refs/heads/*:refs/heads/*' main", 'moves_other_ref'],
    ['git fetch --depth=1 origin', 'shared_state'],
    ['git fetch --dept 1', 'shared_state'],
    ['git fetch --deepen=2', 'shared_state'],
    ['git fetch --shallow-since=2020-01-01', 'shared_state'],
    ['git fetch --shallow-exclude=main', 'shared_state'],
    ['git fetch --unshallow', 'shared_state'],
    ['git fetch --update-shallow', 'shared_state'],
    ['git fetch --update-head-ok . HEAD:main', 'moves_other_ref'],
    ['git fetch -u origin', 'moves_other_ref'],
    ['git fetch --prune-tags', 'moves_other_ref'],
    ['git fetch -P origin', 'moves_other_ref'],
    ['git fetch --force origin', 'moves_other_ref'],
    ["git fetch ../main 'refs/heads/*:refs/remotes/../main/*'", 'moves_other_ref'],
    ['git fetch /work/main main:refs/remotes/origin/main', 'moves_other_ref'],
    ["git fetch --all --refmap='+refs/heads/*:refs/heads/*'", 'moves_other_ref'],
  ],
  'hooks and config': [
    ['git init --template=/tmp/t sub', 'git_config_exec'],
    ['git init --templ /tmp/t sub', 'git_config_exec'],
    ['git clone --template=/tmp/t https://x/y sub', 'git_config_exec'],
    ['git clone -c core.hooksPath=/tmp/h https://x/y sub', 'git_config_exec'],
    ['git clone --config=core.fsmonitor=x https://x/y sub', 'git_config_exec'],
    ['git clone -c core.worktree=/work/main https://x/y sub', 'git_config_override'],
    ['git -c core.hooksPath=/tmp/h commit -m x', 'git_config_exec'],
    ['git -c Core.HooksPath=/tmp/h commit -m x', 'git_config_exec'],
    ['git -c core.fsmonitor=/tmp/x status', 'git_config_exec'],
    ['git -c core.sshCommand=x fetch', 'git_config_exec'],
    ['git -c core.editor=vim commit', 'git_config_exec'],
    ['git -c core.pager=less log', 'git_config_exec'],
    ['git -c diff.external=x diff', 'git_config_exec'],
    ['git -c diff.x.textconv=x diff', 'git_config_exec'],
    ["git -c alias.st='!sh -c id' st", 'git_config_exec'],
    ['git -c filter.lfs.smudge=x checkout -- .', 'git_config_exec'],
    ['git -c credential.helper=x fetch', 'git_config_exec'],
    ['git -c include.path=/tmp/c status', 'git_config_exec'],
    ['git -c includeIf.gitdir:/.path=/tmp/c status', 'git_config_exec'],
    ['git -c core.gitProxy=x fetch', 'git_config_exec'],
    ['git -c uploadpack.packObjectsHook=x fetch', 'git_config_exec'],
    ['git -c core.worktree=/work/main status', 'git_config_override'],
    ['git --config-env=core.hooksPath=HP status', 'git_config_exec'],
    ['git config core.hooksPath /tmp/h', 'shared_state'],
    ['git config --worktree core.hooksPath /tmp/h', 'shared_state'],
    ['git config set core.fsmonitor x', 'shared_state'],
    ["git config alias.x '!sh'", 'shared_state'],
    ['git config -f /work/main/.git/config core.hooksPath x', 'outside_worktree'],
    ['git config -f .git/config core.hooksPath x', 'git_metadata_write'],
    ['GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp git commit', 'git_env_override'],
    ["GIT_CONFIG_PARAMETERS=\"'core.hooksPath'='/tmp'\" git commit", 'git_env_override'],
    ['GIT_CONFIG=/tmp/c git status', 'git_env_override'],
    ['env GIT_CONFIG_GLOBAL=/tmp/c git status', 'git_env_override'],
    ['export GIT_CONFIG_SYSTEM=/tmp/c; git status', 'git_env_override'],
    ['GIT_TEMPLATE_DIR=/tmp/t git init sub', 'git_env_override'],
    ['GIT_EXEC_PATH=/tmp git status', 'git_env_override'],
    ['git --exec-path=/tmp status', 'git_config_exec'],
    ['git st', 'unknown_git_subcommand'],
    ['git cherry-pick --strategy=evil HEAD~1', 'git_runs_program'],
    ['git revert --strat evil HEAD', 'git_runs_program'],
    ['git bisect run make test', 'git_runs_program'],
  ],
  'git pointed at another repository': [
    ['git --git-dir=/work/main/.git log', 'outside_worktree'],
    ['git --git-dir ../main/.git status', 'outside_worktree'],
    ['git --git-dir=/work/main/.git/worktrees/s2 status', 'outside_worktree'],
    ['git --git-dir=.git/worktrees/s2 log', 'outside_worktree'],
    ['git --work-tree=/work/main checkout HEAD -- .', 'outside_worktree'],
    ['git -C /work/main status', 'outside_worktree'],
    ['git -C src -C ../.. status', 'outside_worktree'],
    ['git -C .git/.. status', 'outside_worktree'],
    ['git -C sub/.. status', 'outside_worktree'],
    ['git -C "$D" status', 'dynamic_argument'],
    ['GIT_DIR=/work/main/.git git log', 'outside_worktree'],
    ['env GIT_DIR=/work/main/.git git log', 'outside_worktree'],
    ['export GIT_DIR=/work/main/.git; git log', 'git_env_override'],
    ['GIT_WORK_TREE=/work/main git checkout -- .', 'outside_worktree'],
    ['GIT_COMMON_DIR=/work/main/.git git log', 'git_env_override'],
    ['GIT_INDEX_FILE=/work/main/.git/index git add .', 'git_env_override'],
    ['GIT_OBJECT_DIRECTORY=/tmp/o git add .', 'git_env_override'],
    ['GIT_ALTERNATE_OBJECT_DIRECTORIES=/tmp/o git log', 'git_env_override'],
    ['GIT_NAMESPACE=x git push origin HEAD', 'git_env_override'],
    ['git --namespace=x log', 'git_config_override'],
    ['git --super-prefix=x ls-files', 'unknown_git_option'],
    ['git --bare status', 'outside_worktree'],
    ['git worktree add ../x', 'shared_state'],
    ['git worktree move . /tmp/x', 'shared_state'],
    ['git worktree remove ../s2', 'shared_state'],
    ['git worktree prune', 'shared_state'],
    ['git worktree repair', 'shared_state'],
    ['git init ../x', 'shared_state'],
    ['git init', 'shared_state'],
    ['git init --separate-git-dir=../x sub', 'outside_worktree'],
    ['git clone https://x/y ../x', 'outside_worktree'],
    ['git clone --separate-git-dir=/work/main/.git https://x/y sub', 'outside_worktree'],
    ['git clone /work/main sub', 'outside_worktree'],
    ['git clone . copy', 'outside_worktree'],
    ['git clone -l ../main sub', 'outside_worktree'],
    ['git clone main-copy sub', 'outside_worktree'],
  ],
  'words from input that could be one of these options': [
    ['git rev-list HEAD | xargs git replace -l', 'dynamic_argument'],
    ['ls | xargs git interpret-trailers', 'dynamic_argument'],
    ['ls | xargs git fetch origin', 'dynamic_argument'],
    ['ls | xargs git tag', 'dynamic_argument'],
    ['git cherry-pick --strategy="$S" HEAD', 'dynamic_argument'],
  ],
};

/**
 * What git's model cannot know but the sandbox confines: allowed, with a note saying so (the sandbox decides). A
 * computed cherry-pick operand could be `--strategy=<program>`; the program would run confined.
 */
const UNSURE: readonly string[] = ['git ls-files | xargs git cherry-pick', 'git cherry-pick "$SHA"'];

for (const command of UNSURE) {
  test(`unsure, left to the sandbox: ${command}`, (t) => {
    const d = decide(command);
    t.true(d.allowed && (d.unsure?.length ?? 0) > 0, show(d));
  });
}

const ORDINARY: readonly string[] = [
  'git branch --no-merged',
  'git branch --no-merged main',
  'git branch --no-contains abc123',
  'git branch -v',
  'git branch -vv',
  'git branch --list',
  'git bisect log',
  'git replace --format=short',
  'git replace -l --format=medium',
  "git replace -l 'abc*'",
  'git difftool --tool-help',
  'git clone --shared /work/main ref-shared',
  'git clone file:///work/main ref-transport',
  'git submodule update --init',
  'git submodule update --init --recursive',
  'git submodule --quiet update --init -- vendor/lib',
  "git log --format='%H %s' -n 3",
  'git log --pretty=format:%s main..HEAD',
  'git diff --stat main...HEAD',
  'git show main:src/index.ts',
  'git rev-parse HEAD',
  'git ls-files',
  'git stash list',
  'git worktree list',
  'git tag --list',
  'git notes list',
  'git notes --ref x list',
  'git fetch origin',
  'git fetch --prune origin',
  'git fetch origin main',
  "git fetch origin '+refs/heads/*:refs/remotes/origin/*'",
  'git fetch origin orchard/s1/work:refs/remotes/origin/orchard/s1/work',
  'git fetch --force --no-tags origin main:refs/remotes/origin/main',
  'git push origin HEAD:orchard/s1/work',
  'git push -u origin orchard/s1/work',
  'git push origin +HEAD:refs/heads/orchard/s1/work',
  'git diff --output=out.diff',
  'git log --output=/tmp/log.txt',
  'git format-patch -o patches HEAD~2',
  'git archive -o build/src.tar HEAD',
  'git checkout-index -a --prefix=export/',
  'git read-tree --index-output=/srv/wt/s1/tmp.idx HEAD',
  'git interpret-trailers --in-place msg.txt',
  'git bundle create --version 3 out/b.bundle HEAD',
  'git apply --directory=vendor fix.patch',
  'git apply --include=src/* fix.patch',
  'git config --file=.gitmodules submodule.lib.branch main',
  'git config -f .gitmodules --get submodule.lib.url',
  'git config --get core.hooksPath',
  'git cherry-pick --strategy=ort abc123',
  'git -c user.name=x commit -m x',
  'git clone --no-hardlinks /work/main ref-copy',
  'git clone https://example.com/lib.git vendor/lib',
  'git init scratch',
  'git --git-dir=.git status',
  'git --git-dir=vendor/lib/.git log -1',
  'git -C src status',
];

for (const [family, rows] of Object.entries(ATTACKS)) {
  for (const [command, expected] of rows) {
    test(`${family}: ${command} → ${expected}`, (t) => {
      const d = decide(command);
      t.false(d.allowed, show(d));
      if (!d.allowed) t.is(d.reason, expected, show(d));
    });
  }
}

for (const command of ORDINARY) {
  test(`ordinary git passes: ${command}`, (t) => {
    const d = decide(command);
    t.true(d.allowed, show(d));
  });
}

test('counts: every attack refused, every ordinary command allowed', (t) => {
  const attacks = Object.values(ATTACKS).flat();
  const attacksAllowed = attacks.filter(([c]) => decide(c).allowed).map(([c]) => c);
  const ordinaryRefused = ORDINARY.filter((c) => !decide(c).allowed);
  t.log(`attacks: ${attacks.length - attacksAllowed.length} refused, ${attacksAllowed.length} allowed`);
  t.log(`ordinary: ${ORDINARY.length - ordinaryRefused.length} allowed, ${ordinaryRefused.length} refused`);
  t.deepEqual(attacksAllowed, []);
  t.deepEqual(ordinaryRefused, []);
});

const RUNS = { numRuns: 400, seed: 20261203 };
const quote = fc.constantFrom<(s: string) => string>(
  (s) => s,
  (s) => `'${s}'`,
  (s) => `"${s}"`,
);

// Write targets: spelled as paths outside the worktree (absolute, `..`-relative, sibling prefix, `~`, through
// .git) or inside it (relative, absolute, `./`, the private temp dir).
const OUTSIDE_PATHS = [
  '/work/main/x',
  '../s2/x',
  '../../etc/x',
  '/srv/wt/s1/../s2/x',
  '/srv/wt/s1x/y',
  'src/../../main/x',
  '~/x',
  '.git/hooks/post-checkout',
  '/srv/wt/s1/.git/x',
];
const INSIDE_PATHS = ['out/x', '/srv/wt/s1/out/x', './out/x', 'src/../out/x', '/tmp/x'];

/** Each spelling of a writing option, given the target (quoted as a whole word or after `=`). */
const WRITERS: readonly ((p: string, q: (s: string) => string) => string)[] = [
  (p, q) => `git diff ${q(`--output=${p}`)}`,
  (p, q) => `git log -p --output ${q(p)}`,
  (p, q) => `git show ${q(`--outp=${p}`)} HEAD`,
  (p, q) => `git diff-tree --out ${q(p)} HEAD`,
  (p, q) => `git format-patch -o ${q(p)} HEAD~1`,
  (p, q) => `git format-patch ${q(`-o${p}`)} HEAD~1`,
  (p, q) => `git format-patch --output-dir=${q(p)} HEAD~1`,
  (p, q) => `git archive ${q(`--output=${p}`)} HEAD`,
  (p, q) => `git archive -vo ${q(p)} HEAD`,
  (p, q) => `git checkout-index -a --prefix=${q(`${p}/`)}`,
  (p, q) => `git read-tree --index-o ${q(p)} HEAD`,
  (p, q) => `git interpret-trailers --in-pl ${q(p)}`,
  (p, q) => `git bundle create -q ${q(p)} HEAD`,
  (p, q) => `git apply --build-fake-ancestor=${q(p)} fix.patch`,
  (p, q) => `git mailinfo ${q(p)} msg.out`,
  (p, q) => `git fast-export --export-marks=${q(p)} HEAD`,
];

test('property: a git option that writes a path outside the worktree is never allowed; inside it is', (t) => {
  fc.assert(
    fc.property(fc.nat(WRITERS.length - 1), fc.boolean(), fc.nat(8), quote, (w, outside, k, q) => {
      const path = outside ? OUTSIDE_PATHS[k % OUTSIDE_PATHS.length] : INSIDE_PATHS[k % INSIDE_PATHS.length];
      const command = WRITERS[w](path, q);
      // `~` expands only unquoted at the start of a word (bash leaves `--output=~/x` and `-o~/x` alone): elsewhere
      // it is a directory named `~` inside the worktree.
      if (path.startsWith('~') && !command.includes(' ~/')) return true;
      const d = decide(command);
      if (outside && d.allowed) t.log(`allowed: ${command}`);
      if (!outside && !d.allowed) t.log(`refused: ${command} (${show(d)})`);
      return outside ? !d.allowed && ['outside_worktree', 'git_metadata_write', 'dynamic_argument'].includes(d.reason) : d.allowed;
    }),
    RUNS,
  );
  t.pass();
});

// Refs: sources the child may push from, destinations that are its own branch, and destinations that are not.
const SOURCES = ['HEAD', '@', BRANCH, `refs/heads/${BRANCH}`, 'HEAD~1', 'main', 'abc1234'];
const OWN_DESTINATIONS = [BRANCH, `refs/heads/${BRANCH}`];
const OTHER_DESTINATIONS = [
  'main',
  'refs/heads/main',
  'refs/tags/v1',
  'v1',
  'refs/notes/commits',
  `${BRANCH}2`,
  'orchard/s2/work',
  `refs/heads/${BRANCH}/x`,
  'refs/remotes/origin/main',
  `refs/remotes/origin/${BRANCH}`,
  'refs/replace/abc1234',
  'refs/heads/*',
  'refs/for/main',
  'HEAD',
];

test("property: a push refspec that writes any remote ref but the child's branch is never allowed; its own is", (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom(...SOURCES),
      fc.boolean(),
      fc.nat(OTHER_DESTINATIONS.length - 1),
      fc.boolean(),
      fc.constantFrom('', '-f ', '--force-with-lease ', '-u ', '--atomic '),
      quote,
      (src, own, k, force, option, q) => {
        const dst = own ? OWN_DESTINATIONS[k % OWN_DESTINATIONS.length] : OTHER_DESTINATIONS[k];
        const spec = `${force ? '+' : ''}${src}:${dst}`;
        // Quoting keeps `*` literal; unquoted globs are refused as computed, which is also "not allowed".
        const command = `git push ${option}origin ${dst.includes('*') ? `'${spec}'` : q(spec)}`;
        const d = decide(command);
        return own ? d.allowed : !d.allowed;
      },
    ),
    RUNS,
  );
  t.pass();
});

test("property: commands that create or move refs by name never allow a name other than the child's branch", (t) => {
  const name = fc.constantFrom('main', 'v1', 'refs/heads/main', 'refs/tags/v1', `${BRANCH}2`, 'orchard/s2/work', 'refs/notes/commits', 'x/y');
  const writers: readonly ((n: string) => string)[] = [
    (n) => `git tag ${n}`,
    (n) => `git tag -f ${n} HEAD`,
    (n) => `git notes --ref=${n} add -m x`,
    (n) => `git notes --ref ${n} append -m x HEAD`,
    (n) => `git branch -f ${n} HEAD`,
    (n) => `git branch ${n}`,
    (n) => `git branch -m ${n} y`,
    (n) => `git update-ref ${n} HEAD`,
    (n) => `git symbolic-ref HEAD ${n}`,
    (n) => `git replace ${n} HEAD`,
    (n) => `git push origin HEAD:${n}`,
    (n) => `git push origin ${n}`,
    (n) => `git fetch origin HEAD:${n}`,
  ];
  fc.assert(
    fc.property(fc.nat(writers.length - 1), name, quote, (w, n, q) => !decide(writers[w](q(n))).allowed),
    RUNS,
  );
  t.pass();
});

// Fetch: the faithful copy of a remote branch into that remote's tracking namespace is allowed; any other
// destination, tag fetching or shallow option is not.
test('property: fetch writes only faithful remote-tracking refs, never tags or shallow', (t) => {
  const remote = fc.constantFrom('origin', 'upstream');
  const branch = fc.constantFrom('main', 'feature/x', BRANCH, '*');
  const srcForm = fc.constantFrom(
    (b: string) => b,
    (b: string) => `refs/heads/${b}`,
  );
  const bad = fc.constantFrom(
    (r: string, b: string) => `refs/heads/${b}`,
    (r: string, b: string) => `refs/tags/${b}`,
    (r: string, b: string) => `refs/notes/${b}`,
    (r: string, b: string) => `refs/remotes/${r === 'origin' ? 'upstream' : 'origin'}/${b}`,
    (r: string, b: string) => `refs/remotes/${r}/other-${b}`,
    (r: string, b: string) => b,
  );
  const harmless = fc.constantFrom('', '--prune ', '-q ', '--no-tags ', '--progress ', '-v ');
  const badOption = fc.constantFrom(
    '--tags ',
    '-t ',
    '--ta ',
    '--depth=1 ',
    '--depth 1 ',
    '--dept=3 ',
    '--deepen=2 ',
    '--unshallow ',
    '--shallow-since=2020-01-01 ',
    '--shallow-exclude=main ',
    '--update-shallow ',
    '--update-head-ok ',
    '-u ',
    '--update-h ',
    '--prune-tags ',
    '-P ',
    '--force ',
    '-f ',
  );
  fc.assert(
    fc.property(
      remote,
      branch,
      srcForm,
      fc.boolean(),
      bad,
      fc.boolean(),
      harmless,
      badOption,
      fc.boolean(),
      (r, b, sf, faithful, dstOf, plus, opt, badOpt, useBad) => {
        const dst = faithful ? `refs/remotes/${r}/${b}` : dstOf(r, b);
        const spec = `'${plus ? '+' : ''}${sf(b)}:${dst}'`;
        const command = `git fetch ${useBad ? badOpt : opt}${r} ${spec}`;
        const d = decide(command);
        // The child's own branch and its own tracking ref may be written whatever the source.
        const own = [`refs/remotes/${r}/${BRANCH}`, `refs/heads/${BRANCH}`, BRANCH].includes(dst);
        const ok = faithful && !useBad ? d.allowed : useBad ? !d.allowed : own || !d.allowed;
        if (!ok) t.log(`${show(d)}: ${command}`);
        return ok;
      },
    ),
    RUNS,
  );
  t.pass();
});

const EXEC_KEYS = [
  'core.hooksPath',
  'core.fsmonitor',
  'core.sshCommand',
  'core.editor',
  'core.pager',
  'diff.x.command',
  'diff.external',
  'alias.st',
  'filter.x.clean',
  'credential.helper',
  'include.path',
  'includeIf.gitdir:/x/.path',
  'core.gitProxy',
  'uploadpack.packObjectsHook',
  'pager.log',
  'sequence.editor',
  'gpg.program',
  'merge.x.driver',
  'diff.x.textconv',
  'core.askPass',
  'core.alternateRefsCommand',
];
const REDIRECT_KEYS = ['core.worktree', 'core.bare', 'remote.origin.url', 'url.x.insteadOf', 'init.templateDir', 'core.excludesFile'];
const HARMLESS_KEYS = ['user.name', 'user.email', 'color.ui', 'core.quotepath', 'log.date', 'diff.renames'];
/** Mixed case per character: git lowercases section and variable names. */
const recase = (key: string, mask: number) => {
  const parts = key.split('.');
  const flip = (s: string) => [...s].map((c, i) => ((mask >> i) & 1 ? c.toUpperCase() : c)).join('');
  return parts.length <= 2 ? parts.map(flip).join('.') : [flip(parts[0]), ...parts.slice(1, -1), flip(parts[parts.length - 1])].join('.');
};

test('property: config that runs programs or redirects git never passes, by any route; harmless keys do', (t) => {
  const routes: readonly ((k: string, q: (s: string) => string) => string)[] = [
    (k, q) => `git -c ${q(`${k}=x`)} status`,
    (k, q) => `git --config-env=${q(`${k}=V`)} status`,
    (k, q) => `git clone -c ${q(`${k}=x`)} https://x/y sub`,
    (k, q) => `git clone --config=${q(`${k}=x`)} https://x/y sub`,
  ];
  const writes: readonly ((k: string, q: (s: string) => string) => string)[] = [
    (k, q) => `git config ${q(k)} x`,
    (k, q) => `git config --worktree ${q(k)} x`,
    (k, q) => `git config set ${q(k)} x`,
    (k, q) => `git config --add ${q(k)} x`,
    (k, q) => `git config --global ${q(k)} x`,
    (k, q) => `git config --unset ${q(k)}`,
  ];
  fc.assert(
    fc.property(fc.constantFrom('exec', 'redirect', 'harmless'), fc.nat(40), fc.nat(255), fc.nat(20), quote, fc.boolean(), (kind, k, mask, r, q, write) => {
      const keys = kind === 'exec' ? EXEC_KEYS : kind === 'redirect' ? REDIRECT_KEYS : HARMLESS_KEYS;
      const key = recase(keys[k % keys.length], mask);
      const command = write ? writes[r % writes.length](key, q) : routes[r % routes.length](key, q);
      const d = decide(command);
      // Every write of the shared config is refused; a harmless override is allowed.
      return write || kind !== 'harmless' ? !d.allowed : d.allowed;
    }),
    RUNS,
  );
  t.pass();
});

test('property: GIT_CONFIG_* and other redirecting variables are refused in every assignment form', (t) => {
  const names = fc.constantFrom(
    'GIT_CONFIG_COUNT',
    'GIT_CONFIG_KEY_0',
    'GIT_CONFIG_VALUE_0',
    'GIT_CONFIG_PARAMETERS',
    'GIT_CONFIG',
    'GIT_CONFIG_GLOBAL',
    'GIT_CONFIG_SYSTEM',
    'GIT_COMMON_DIR',
    'GIT_INDEX_FILE',
    'GIT_OBJECT_DIRECTORY',
    'GIT_ALTERNATE_OBJECT_DIRECTORIES',
    'GIT_NAMESPACE',
    'GIT_EXEC_PATH',
    'GIT_TEMPLATE_DIR',
    'GIT_SSH_COMMAND',
    'GIT_EXTERNAL_DIFF',
    'GIT_ASKPASS',
  );
  const forms: readonly ((n: string, v: string) => string)[] = [
    (n, v) => `${n}=${v} git status`,
    (n, v) => `env ${n}=${v} git status`,
    (n, v) => `export ${n}=${v}; git status`,
    (n, v) => `declare -x ${n}=${v}; git status`,
    (n, v) => `env -u HOME ${n}=${v} git log -1`,
  ];
  fc.assert(
    fc.property(names, fc.nat(forms.length - 1), fc.constantFrom('1', '/tmp/x', "'core.hooksPath'", 'x'), (n, f, v) => !decide(forms[f](n, v)).allowed),
    RUNS,
  );
  t.pass();
});

test('property: --template in any spelling is refused for init and clone; without it they pass', (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom('init', 'clone https://x/y'),
      fc.constantFrom('--template=/tmp/t', '--template /tmp/t', '--templ=/tmp/t', '--te /tmp/t', "'--template=sub/t'", '--template=sub/t'),
      fc.boolean(),
      (cmd, option, withTemplate) => {
        const d = decide(
          `git ${cmd.startsWith('init') ? 'init' : 'clone'} ${withTemplate ? `${option} ` : ''}${cmd.startsWith('clone') ? 'https://x/y ' : ''}newrepo`,
        );
        return withTemplate ? !d.allowed && d.reason === 'git_config_exec' : d.allowed;
      },
    ),
    RUNS,
  );
  t.pass();
});

// Another repository: each way of pointing git at a directory, given inside or outside paths.
const REPO_OUTSIDE = [
  '/work/main',
  '/work/main/.git',
  '..',
  '../s2',
  '/srv/wt/s1/..',
  'src/../..',
  '.git/..',
  '.git',
  '.git/worktrees/s2',
  'sub/..',
  '/srv/wt/s1x',
];
const REPO_INSIDE = ['src', '/srv/wt/s1/src', './src', 'vendor/lib'];

test('property: git pointed at a directory outside the worktree (or through .git) is never allowed; inside it is', (t) => {
  const forms: readonly ((p: string, q: (s: string) => string) => string)[] = [
    (p, q) => `git -C ${q(p)} status`,
    (p, q) => `git -C src -C ${q(p.startsWith('/') ? p : `../${p}`)} status`,
    (p, q) => `git ${q(`--git-dir=${p}/.git`)} log -1`,
    (p, q) => `git --git-dir ${q(`${p}/.git`)} log -1`,
    (p, q) => `git --work-tree=${q(p)} status`,
    (p, q) => `GIT_DIR=${q(`${p}/.git`)} git log -1`,
    (p, q) => `env GIT_DIR=${q(`${p}/.git`)} git log -1`,
    (p, q) => `GIT_WORK_TREE=${q(p)} git status`,
  ];
  fc.assert(
    fc.property(fc.nat(forms.length - 1), fc.boolean(), fc.nat(20), quote, (f, outside, k, q) => {
      const path = outside ? REPO_OUTSIDE[k % REPO_OUTSIDE.length] : REPO_INSIDE[k % REPO_INSIDE.length];
      const command = forms[f](path, q);
      const d = decide(command);
      // GIT_DIR/GIT_WORK_TREE are judged lexically by the environment model, which does not know about `.git`
      // or `dir/..`; the property pins those to paths that also leave the worktree lexically.
      const lexicalOnly = f >= 5 && !['..', '../s2', '/work/main', '/work/main/.git', '/srv/wt/s1/..', 'src/../..', '/srv/wt/s1x'].includes(path);
      if (outside && lexicalOnly) return true;
      if (outside && d.allowed) t.log(`allowed: ${command}`);
      if (!outside && !d.allowed) t.log(`refused: ${command} (${show(d)})`);
      return outside ? !d.allowed : d.allowed;
    }),
    RUNS,
  );
  t.pass();
});

test('property: worktree administration and repositories created outside the worktree are refused', (t) => {
  fc.assert(
    fc.property(fc.constantFrom('add ../x', 'add sub/x', 'move . /tmp/x', 'remove ../s2', 'prune', 'repair', 'lock .', 'unlock .'), (action) => {
      const d = decide(`git worktree ${action}`);
      return !d.allowed && d.reason === 'shared_state';
    }),
    { numRuns: 50, seed: 20261203 },
  );
  fc.assert(
    fc.property(fc.constantFrom('init', 'clone https://x/y', 'clone --no-hardlinks /work/main'), fc.boolean(), fc.nat(10), (cmd, outside, k) => {
      const dest = outside ? ['../x', '/work/main/x', '/srv/wt/s1/../x', '/srv/wt/s2'][k % 4] : ['sub', 'vendor/x', '/srv/wt/s1/scratch'][k % 3];
      const d = decide(`git ${cmd} ${dest}`);
      return outside ? !d.allowed : d.allowed;
    }),
    RUNS,
  );
  t.pass();
});

test('property: ordinary read-only git with varied options passes', (t) => {
  const forms = fc.constantFrom(
    (r: string, n: number) => `git branch --no-merged ${r}`,
    (r: string) => `git branch --no-contains ${r}`,
    (r: string) => `git branch --merged ${r} -v`,
    (r: string, n: number) => `git log --format='%h %s' -n ${n} ${r}..HEAD`,
    (r: string) => `git diff --stat ${r}...HEAD`,
    (r: string) => `git show ${r}:README.md`,
    (r: string, n: number) => `git log --oneline -${n} ${r}`,
    (r: string) => `git rev-parse --verify ${r}`,
    (r: string) => `git fetch origin ${r}`,
    (r: string) => `git fetch origin '+refs/heads/${r}:refs/remotes/origin/${r}'`,
    (r: string) => `git notes --ref ${r} show HEAD`,
    (r: string) => `git tag --list '${r}*'`,
    (r: string) => `git merge-base HEAD ${r}`,
  );
  fc.assert(
    fc.property(forms, fc.constantFrom('main', 'origin/main', 'feature/x', BRANCH, 'abc1234'), fc.integer({ min: 1, max: 50 }), (form, r, n) => {
      const command = form(r, n);
      const d = decide(command);
      if (!d.allowed) t.log(`refused: ${command} (${show(d)})`);
      return d.allowed;
    }),
    RUNS,
  );
  t.pass();
});

// Words from xargs input reaching a read-only command: the guard cannot know them. The only effect they can add
// to `git show` is `--output=<file>`, which the kernel layer confines, so with an `unsure` channel the guard says
// so and allows; without one it refuses. Options that run programs are refused either way.
const xargsCall = (sub: string[], unsure?: (why: string) => void) =>
  decideGit(
    { argv: sub.map((w) => literalWord(w)), trailingDynamic: true, cwd: { kind: 'known', path: WORKTREE }, text: `xargs git ${sub.join(' ')}`, unsure },
    { branch: BRANCH, worktree: WORKTREE },
  );

test('xargs git show: allowed with a note through the unsure channel, refused without it', (t) => {
  const notes: string[] = [];
  t.is(
    xargsCall(['show'], (why) => notes.push(why)),
    undefined,
  );
  t.is(notes.length, 1);
  t.regex(notes[0], /--output/);
  t.is(xargsCall(['show'])?.reason, 'dynamic_argument');
  t.is(
    xargsCall(['log', '--stat', '--'], (why) => notes.push(why)),
    undefined,
    'after -- the input is paths',
  );
  t.is(notes.length, 1, 'no note when the input can only be paths');
  t.is(xargsCall(['grep', 'foo'], (why) => notes.push(why))?.reason, 'dynamic_argument', 'grep input could be -O<program>');
  t.is(xargsCall(['diff', '--output=/work/main/x'], (why) => notes.push(why))?.reason, 'outside_worktree');
});

// GIT_DIR and GIT_WORK_TREE given to git (the caller passes its prefix or `env` assignments): judged like
// `--git-dir`/`--work-tree`, including the `.git/…` and `dir/..` paths the lexical environment model lets by.
const gitWithEnv = (name: string, value: string) =>
  decideGit(
    {
      argv: [literalWord('log')],
      trailingDynamic: false,
      cwd: { kind: 'known', path: WORKTREE },
      text: `${name}=${value} git log`,
      env: [{ name, value: literalWord(value) }],
    },
    { branch: BRANCH, worktree: WORKTREE },
  );

test("GIT_DIR and GIT_WORK_TREE in git's environment: the same table as --git-dir and --work-tree", (t) => {
  const rows: readonly [string, string, GuardReason | 'allow'][] = [
    ['GIT_DIR', '.git/worktrees/s2', 'outside_worktree'],
    ['GIT_DIR', '/work/main/.git', 'outside_worktree'],
    ['GIT_DIR', 'sub/../../main/.git', 'outside_worktree'],
    ['GIT_DIR', 'vendor/../.git', 'outside_worktree'],
    ['GIT_WORK_TREE', '.git', 'outside_worktree'],
    ['GIT_WORK_TREE', '../s2', 'outside_worktree'],
    ['GIT_DIR', '.git', 'allow'],
    ['GIT_DIR', 'vendor/lib/.git', 'allow'],
    ['GIT_WORK_TREE', 'src', 'allow'],
    ['GIT_WORK_TREE', `${WORKTREE}/src`, 'allow'],
  ];
  for (const [name, value, expected] of rows) {
    const r = gitWithEnv(name, value);
    t.is(r?.reason ?? 'allow', expected, `${name}=${value}: ${r?.why ?? 'allowed'}`);
  }
});
