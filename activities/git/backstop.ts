import { runFileText } from '../bash/spawner';
import { randomUUID } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { WorkspaceError } from '../workspace/paths';

/**
 * The git-level backstop behind the bash guard (GUARD.md §3.5, docs/backstop.md): a `reference-transaction`
 * hook in the repository's shared hooks directory that refuses, inside an isolated child's worktree, every
 * update of a ref other than the child's own branch. The guard reads the commands the agent types; this hook
 * also sees what scripts run (`./build.sh`, `npm run x`, `make`). It is a backstop against accidents, not a
 * boundary: a command that turns hooks off (`-c core.hooksPath=`), rewrites refs without a transaction, or
 * writes files under `.git` directly passes it (docs/backstop.md lists the gaps).
 */

/** File in a worktree's own admin dir (`git rev-parse --absolute-git-dir`) naming the one branch it may move. */
export const ISOLATION_MARKER = 'orchard-isolated';
/**
 * Optional second signal, read from the environment of the git command: when set, the same rule applies to
 * every Orchard-managed worktree the command updates, so a script that `cd`s into the main checkout (or uses
 * `git -C`, `--git-dir`) is held to the child's branch too. Unsetting it is trivial; it catches accidents only.
 */
export const ISOLATED_BRANCH_ENV = 'ORCHARD_ISOLATED_BRANCH';
/** Where a foreign `reference-transaction` hook is kept; ours runs it for every transaction. */
export const CHAINED_HOOK = 'reference-transaction.orchard-chained';
const HOOK = 'reference-transaction';
/** First line after the shebang; identifies our hook and its version (a different version is rewritten). */
const SIGNATURE = '# orchard-ref-backstop v2';
const GIT_TIMEOUT_MS = 30_000;

/**
 * The hook. POSIX sh, because git runs it for every ref update in every worktree of the repository: outside an
 * isolated child it costs one `git rev-parse` on `prepared` and nothing on the other states, and it never reads
 * stdin there (git ignores the broken pipe). Refs that stay allowed: the branch itself, its remote-tracking
 * refs (`refs/remotes/<remote>/<branch>`, remote names without `/`), and the per-worktree refs of the updating
 * worktree. `main-worktree/…` and `worktrees/<id>/…` name another worktree's refs and are refused; so is every
 * other name, including new branches, tags, notes and `refs/stash` (shared by all worktrees).
 */
export const REF_BACKSTOP_HOOK = `#!/bin/sh
${SIGNATURE}
# Installed by Orchard (activities/git/backstop.ts, docs/backstop.md). In a worktree whose admin dir
# holds ${ISOLATION_MARKER} (the one branch it may move), or when ${ISOLATED_BRANCH_ENV} is set,
# this refuses any other shared ref update. Elsewhere it only runs the hook it replaced, if any:
# ${CHAINED_HOOK}.
chained="\${0%/*}/${CHAINED_HOOK}"
[ -x "$chained" ] || chained=
# A chained hook that is this hook (a copy of ours) would run itself forever: it is not run.
if [ -n "$chained" ]; then
  { IFS= read -r _ && IFS= read -r sig; } <"$chained" || sig=
  case $sig in '# orchard-ref-backstop'*) chained= ;; esac
fi
marker=
if [ "$1" = prepared ]; then
  gitdir=$(git rev-parse --absolute-git-dir 2>/dev/null) && [ -f "$gitdir/${ISOLATION_MARKER}" ] &&
    marker="$gitdir/${ISOLATION_MARKER}"
fi
envbranch=\${${ISOLATED_BRANCH_ENV}:-}
if [ "$1" != prepared ] || { [ -z "$marker" ] && [ -z "$envbranch" ]; }; then
  [ -n "$chained" ] && exec "$chained" "$@"
  exit 0
fi
markbranch=
[ -n "$marker" ] && { IFS= read -r markbranch <"$marker" || :; }

allowed() {
  case $1 in
    HEAD | ORIG_HEAD | FETCH_HEAD | MERGE_HEAD | CHERRY_PICK_HEAD | REVERT_HEAD | REBASE_HEAD | AUTO_MERGE) return 0 ;;
    refs/bisect/* | refs/worktree/* | refs/rewritten/*) return 0 ;;
    BISECT_*/*) return 1 ;;
    BISECT_*) return 0 ;;
  esac
  [ -n "$2" ] || return 1
  [ "$1" = "refs/heads/$2" ] && return 0
  case $1 in
    refs/remotes/*/*)
      rest=\${1#refs/remotes/}
      [ "$rest" = "\${rest%%/*}/$2" ] && return 0 ;;
  esac
  return 1
}

input=
refused=
while IFS=' ' read -r old new ref || [ -n "$ref" ]; do
  [ -n "$chained" ] && input="$input$old $new $ref
"
  if [ -n "$marker" ] && ! allowed "$ref" "$markbranch"; then
    refused="$refused $ref"
  elif [ -n "$envbranch" ] && ! allowed "$ref" "$envbranch"; then
    refused="$refused $ref"
  fi
done
if [ -n "$refused" ]; then
  own=\${markbranch:-$envbranch}
  echo "orchard: refused to update$refused: this command runs for an isolated child session," \\
    "which may move only refs/heads/\${own:-(none)} (and its remote-tracking refs). Other branches, tags," \\
    "refs/stash and other worktrees' HEADs are shared with other sessions; leave them to their owners." >&2
  exit 1
fi
[ -z "$chained" ] && exit 0
printf '%s' "$input" | "$chained" "$@"
`;

export interface RefBackstopInstall {
  /** Absolute path of the installed hook. */
  hookPath: string;
  /** false when the same hook was already there (a repeated call changes nothing). */
  installed: boolean;
  /** The foreign hook ours runs after its own check, when there is one. */
  chained?: string;
}

function message(err: unknown): string {
  const e = err as { stderr?: unknown; message?: unknown };
  const text = typeof e.stderr === 'string' && e.stderr.trim() ? e.stderr : String(e.message ?? err);
  return text.trim();
}

/**
 * Runs git with only the repository's own config, as an agent's git sees it: the session HOME has no
 * ~/.gitconfig of the operator's, and the system config is off (bash/env.ts).
 */
function git(cwd: string, args: string[]): Promise<string> {
  return runFileText('git', args, {
    cwd,
    timeoutMs: GIT_TIMEOUT_MS,
    env: { ...process.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1', LC_ALL: 'C' },
  });
}

async function exists(p: string): Promise<boolean> {
  return fs.lstat(p).then(
    () => true,
    () => false,
  );
}

async function writeAtomically(file: string, text: string, mode: number): Promise<void> {
  const tmp = `${file}.orchard-${randomUUID()}.tmp`;
  try {
    await fs.writeFile(tmp, text, { mode });
    await fs.chmod(tmp, mode); // writeFile's mode is filtered by the umask
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
}

/**
 * The hooks directory every worktree of `repo` uses. Refused when it is not one shared place: a relative
 * core.hooksPath is resolved inside each worktree's own checkout (the child's copy is the child's to edit), and
 * `/dev/null` (or any non-directory) means hooks are off.
 */
async function sharedHooksDir(repo: string): Promise<string> {
  const configured = (await git(repo, ['config', '--get', 'core.hooksPath']).catch(() => '')).trim();
  if (configured && !path.isAbsolute(configured)) {
    throw new WorkspaceError(
      'invalid_input',
      `${repo} sets core.hooksPath to ${JSON.stringify(configured)}, which each worktree resolves on its own ` +
        '(inside its checkout, or under the session HOME for `~`), so a child could edit or drop the ref ' +
        'backstop; set an absolute core.hooksPath (or unset it) before Orchard manages this repository',
    );
  }
  const dir = (await git(repo, ['rev-parse', '--path-format=absolute', '--git-path', 'hooks'])).trim();
  const stat = await fs.stat(dir).catch(() => undefined);
  if (stat && !stat.isDirectory()) {
    throw new WorkspaceError(
      'invalid_input',
      `hooks of ${repo} are off (core.hooksPath is ${JSON.stringify(configured || dir)}, not a directory), ` +
        'so the ref backstop cannot run; point core.hooksPath at a directory or unset it',
    );
  }
  if (!stat) await fs.mkdir(dir, { recursive: true });
  return dir;
}

/**
 * Installs the ref backstop in the hooks directory of `repo` (shared by all its worktrees). Idempotent; an older
 * version of our hook is replaced. A foreign `reference-transaction` hook is kept, not destroyed: it is moved to
 * `reference-transaction.orchard-chained` (hard link first, so there is no moment without a hook) and ours runs
 * it with the same arguments and stdin after its own check; in an isolated child a refused transaction does not
 * reach it for `prepared` (git then reports `aborted` to both). If both a foreign hook and a chained one exist,
 * the install refuses rather than guess which to keep. An absolute core.hooksPath shared by several
 * repositories gets the hook too: it is inert wherever no worktree is marked.
 */
export async function installRefBackstop(repo: string): Promise<RefBackstopInstall> {
  const root = path.resolve(repo);
  try {
    await git(root, ['rev-parse', '--git-dir']);
  } catch (err) {
    throw new WorkspaceError('repository_not_found', `${root} is not a git repository: ${message(err)}`);
  }
  const dir = await sharedHooksDir(root);
  const hookPath = path.join(dir, HOOK);
  const chainedPath = path.join(dir, CHAINED_HOOK);
  // Installs race (two members of one repository prepare their worktrees at once, in one worker or several): every
  // step below is create-if-absent or re-checked, and a lost race starts over from what is on disk now. Seen before
  // this: one install read "no hook", another created ours, and the first then chained ours as "foreign", so the
  // hook ran itself forever and every ref update of the repository hung.
  for (let attempt = 0; attempt < 20; attempt++) {
    const chainedText = await readHook(chainedPath);
    const chained = chainedText === undefined ? undefined : chainedPath;
    // A chained hook that is ours is a broken earlier install: removed (ours never chains itself).
    if (chainedText !== undefined && isOurs(chainedText)) {
      await fs.rm(chainedPath, { force: true });
      continue;
    }
    const current = await readHook(hookPath);
    if (current !== undefined && isOurs(current)) {
      const stat = await fs.stat(hookPath);
      if (current === REF_BACKSTOP_HOOK && (stat.mode & 0o111) === 0o111) return { hookPath, installed: false, chained };
      await writeAtomically(hookPath, REF_BACKSTOP_HOOK, 0o755);
      return { hookPath, installed: true, chained };
    }
    if (current === undefined) {
      if (await createExclusively(hookPath, REF_BACKSTOP_HOOK, 0o755)) return { hookPath, installed: true, chained };
      continue;
    }
    // A foreign hook: kept as the chained one, then replaced by ours (there is no moment without a hook).
    if (chained) {
      throw new WorkspaceError(
        'invalid_input',
        `${hookPath} is a foreign hook and ${chainedPath} already exists; refusing to overwrite either. ` +
          `Merge them by hand (or remove one), then install the ref backstop again`,
      );
    }
    try {
      await fs.link(hookPath, chainedPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      if (!(await createExclusively(chainedPath, current, (await fs.stat(hookPath)).mode & 0o7777))) continue;
    }
    // What was linked is the hook as it is now: if another install replaced it with ours meanwhile, undo the link.
    if (isOurs((await readHook(chainedPath)) ?? '')) {
      await fs.rm(chainedPath, { force: true });
      continue;
    }
    await writeAtomically(hookPath, REF_BACKSTOP_HOOK, 0o755);
    return { hookPath, installed: true, chained: chainedPath };
  }
  throw new WorkspaceError('invalid_input', `the ref backstop could not be installed in ${dir}: its hooks keep changing under it`);
}

const isOurs = (text: string): boolean => text.split('\n')[1]?.startsWith('# orchard-ref-backstop') ?? false;

async function readHook(file: string): Promise<string | undefined> {
  return fs.readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
}

/** Writes `file` only if it does not exist (a complete file, linked into place): false when it already did. */
async function createExclusively(file: string, text: string, mode: number): Promise<boolean> {
  const tmp = `${file}.orchard-${randomUUID()}.tmp`;
  try {
    await fs.writeFile(tmp, text, { mode });
    await fs.chmod(tmp, mode);
    await fs.link(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    await fs.rm(tmp, { force: true });
  }
}

async function adminDirs(worktree: string): Promise<{ gitDir: string; commonDir: string }> {
  const out = await git(worktree, ['rev-parse', '--path-format=absolute', '--absolute-git-dir', '--git-common-dir']);
  const [gitDir, commonDir] = out.trim().split('\n');
  return { gitDir, commonDir };
}

/**
 * Marks `worktree` as an isolated child that may move only `refs/heads/<branch>`: writes the marker into the
 * worktree's own admin dir (`<common dir>/worktrees/<id>/`), which `git worktree remove` deletes with it. Call it
 * after every prepareWorktree (a re-created worktree has a fresh admin dir), with the backstop installed. The
 * main worktree is refused: its admin dir is the common dir, and marking it would bind the operator's checkout.
 */
export async function markWorktreeIsolated(worktree: string, branch: string): Promise<void> {
  const dir = path.resolve(worktree);
  try {
    await git(dir, ['check-ref-format', `refs/heads/${branch}`]);
  } catch {
    throw new WorkspaceError('invalid_input', `${JSON.stringify(branch)} is not a valid branch name`);
  }
  let dirs: { gitDir: string; commonDir: string };
  try {
    dirs = await adminDirs(dir);
  } catch (err) {
    throw new WorkspaceError('repository_not_found', `${dir} is not a git worktree: ${message(err)}`);
  }
  if (path.resolve(dirs.gitDir) === path.resolve(dirs.commonDir)) {
    throw new WorkspaceError(
      'invalid_input',
      `${dir} is a main worktree (or a bare repository), not a linked worktree; ` + 'only a session worktree can be isolated',
    );
  }
  await writeAtomically(path.join(dirs.gitDir, ISOLATION_MARKER), `${branch}\n`, 0o644);
}

/** Removes the isolation marker of `worktree`; nothing to do when it or its worktree is already gone. */
export async function unmarkWorktree(worktree: string): Promise<void> {
  const dir = path.resolve(worktree);
  if (!(await exists(dir))) return;
  const { gitDir } = await adminDirs(dir);
  await fs.rm(path.join(gitDir, ISOLATION_MARKER), { force: true });
}

/** The branch `worktree` is isolated to, or undefined when it is not marked. */
export async function isolatedBranch(worktree: string): Promise<string | undefined> {
  const { gitDir } = await adminDirs(path.resolve(worktree));
  const text = await fs.readFile(path.join(gitDir, ISOLATION_MARKER), 'utf8').catch(() => undefined);
  return text === undefined ? undefined : text.split('\n')[0];
}
