import { has, optValues, parseOptions, type OptSpec, type Parsed, type ParseResult } from './options';
import { checkWriteTarget, cwdInside, describeCwd, isInside, resolvePath, type Cwd } from './paths';
import { INTEGRATION_ROUTE, refusal, type HistoryClaim, type Refusal } from './reasons';
import { describeWord, exactValue, type Word } from './words';

/**
 * The git argv model: global options (exact match, as git.c parses them), then the subcommand, then a rule per
 * subcommand. Rules are written against what an isolated child may do: read anything inside its worktree, write
 * its own branch B, never move another ref or worktree, never integrate (the orchestrator does that).
 */

export interface GitCall {
  /** Words after `git` (for `git-foo` programs: `foo` and the rest). */
  readonly argv: readonly Word[];
  /** More words of unknown value follow (xargs input). */
  readonly trailingDynamic: boolean;
  /** Where git starts. */
  readonly cwd: Cwd;
  /** The command text, for messages. */
  readonly text: string;
  /**
   * Where the guard cannot know but the sandbox confines the effect (words from xargs input reaching a command
   * whose only effects beyond reading are written files, a computed cherry-pick operand that could be
   * `--strategy=<program>`): called with what the guard could not judge, and the command is allowed. Without it
   * such commands are refused as dynamic_argument.
   */
  readonly unsure?: (why: string) => void;
  /**
   * Environment assignments for this git (prefix or `env NAME=…`): GIT_DIR and GIT_WORK_TREE are judged like
   * `--git-dir` and `--work-tree`. (Every other redirecting GIT_* variable is refused by the environment model.)
   */
  readonly env?: readonly { readonly name: string; readonly value: Word }[];
  /**
   * Allows a reset, rebase or checkout of the own branch on the condition that the host confirms what only the
   * repository knows (see HistoryClaim). Without it such commands are refused as before.
   */
  readonly claim?: (claim: Omit<HistoryClaim, 'construct'>) => void;
  /** Reads shell code git runs (`rebase -x <cmd>`) like `bash -c`: its refusal, or undefined. Without it such code is refused. */
  readonly readCode?: (source: string, origin: string) => Refusal | undefined;
}

export interface GitScope {
  readonly branch: string;
  readonly worktree: string;
}

type Verdict = Refusal | undefined;

export function decideGit(call: GitCall, scope: GitScope): Verdict {
  const deny = (reason: Parameters<typeof refusal>[0], why: string, instead?: string) => refusal(reason, call.text, why, instead);
  let cwd = call.cwd;
  const argv = call.argv;
  for (const a of call.env ?? []) {
    if (a.name !== 'GIT_DIR' && a.name !== 'GIT_WORK_TREE') continue;
    const where = gitPath(a.value, cwd, scope, a.name === 'GIT_DIR' ? '--git-dir' : '--work-tree', a.name);
    if ('reason' in where) return { ...where, refused: call.text };
  }
  let i = 0;
  for (; i < argv.length; i++) {
    const w = argv[i];
    const v = exactValue(w);
    if (v === undefined) {
      return deny('dynamic_argument', `git's global options or subcommand \`${w.text}\` are computed at run time`);
    }
    if (!v.startsWith('-')) break;
    const missing = () => (call.trailingDynamic ? deny('dynamic_argument', `the value of \`${v}\` comes from input at run time`) : undefined);
    const next = () => argv[++i];
    const valueOf = (name: string): Word | undefined => {
      if (v.startsWith(`${name}=`)) return { ...w, value: v.slice(name.length + 1), prefix: v.slice(name.length + 1) };
      if (v === name) return next();
      return undefined;
    };
    if (v === '-C') {
      const p = next();
      if (!p) return missing(); // git reports the missing argument
      const where = gitPath(p, cwd, scope, '-C');
      if ('reason' in where) return { ...where, refused: call.text };
      cwd = where;
      continue;
    }
    if (v === '-c') {
      const kv = next();
      if (!kv) return missing();
      const problem = configOverride(kv, '-c');
      if (problem) return deny(problem.reason, problem.why);
      continue;
    }
    if (v === '--config-env' || v.startsWith('--config-env=')) {
      const kv = valueOf('--config-env');
      if (!kv) return missing();
      const problem = configOverride(kv, '--config-env');
      if (problem) return deny(problem.reason, problem.why);
      continue;
    }
    if (v === '--git-dir' || v.startsWith('--git-dir=') || v === '--work-tree' || v.startsWith('--work-tree=')) {
      const name = v.startsWith('--git-dir') ? '--git-dir' : '--work-tree';
      const p = valueOf(name);
      if (!p) return missing();
      const where = gitPath(p, cwd, scope, name);
      if ('reason' in where) return { ...where, refused: call.text };
      continue;
    }
    if (v === '--namespace' || v.startsWith('--namespace=')) {
      return deny('git_config_override', '`--namespace` makes git read and write a different set of refs');
    }
    if (v.startsWith('--exec-path=')) return deny('git_config_exec', '`--exec-path=` makes git run its subcommands from another directory');
    if (v === '--exec-path' || v === '--html-path' || v === '--man-path' || v === '--info-path' || v.startsWith('--list-cmds=')) {
      return undefined; // prints and exits; the rest never runs
    }
    if (v === '--version' || v === '-v' || v === '--help' || v === '-h') return undefined;
    if (v === '--bare') return deny('outside_worktree', '`--bare` makes git treat the current directory as the repository');
    if (v === '--attr-source' || v.startsWith('--attr-source=')) {
      if (!valueOf('--attr-source')) return missing();
      continue;
    }
    if (GLOBAL_FLAGS.has(v)) continue;
    return deny('unknown_git_option', `\`${v}\` is not a git global option the guard knows (global options must match exactly)`);
  }
  if (i >= argv.length) {
    if (call.trailingDynamic) return deny('dynamic_argument', 'the git subcommand comes from input at run time');
    return undefined; // bare `git` prints usage
  }
  if (!cwdInside(cwd, scope.worktree)) {
    return deny('outside_worktree', `git would run in ${describeCwd(cwd)}, outside ${scope.worktree}`);
  }
  const sub = argv[i].value as string;
  const rule = SUBCOMMANDS[sub];
  if (!rule) {
    return deny('unknown_git_subcommand', `\`git ${sub}\` is not a subcommand the guard knows; it may be an alias defined in config, so it is refused`);
  }
  return rule({
    args: argv.slice(i + 1),
    trailingDynamic: call.trailingDynamic,
    cwd,
    scope,
    sub,
    deny,
    unsure: call.unsure,
    claim: call.claim,
    readCode: call.readCode,
  });
}

const GLOBAL_FLAGS = new Set([
  '-p',
  '--paginate',
  '-P',
  '--no-pager',
  '--no-replace-objects',
  '--no-lazy-fetch',
  '--literal-pathspecs',
  '--glob-pathspecs',
  '--noglob-pathspecs',
  '--icase-pathspecs',
  '--no-optional-locks',
  '--no-advice',
]);

/**
 * A directory git is pointed at (`-C`, `--git-dir`, `--work-tree`): it must stay inside the worktree and must not
 * go through a `.git` entry. In a linked worktree `.git` is a file naming the shared admin directory, so a path
 * through it (`.git/…`, or `.git` itself as a directory to run in) works only if `.git` was replaced by a
 * directory or a link into the shared repository. `--git-dir` may name a `.git` itself (this worktree's, or a
 * nested repository's); what a `.git` file inside the worktree points at is the kernel layer's business.
 */
function gitPath(p: Word, cwd: Cwd, scope: GitScope, option: string, spelled = option): Cwd | Refusal {
  const v = exactValue(p);
  if (v === undefined) return refusal('dynamic_argument', '', `the path for \`${spelled}\` (\`${p.text}\`) is computed at run time`);
  const where = resolvePath(cwd, v, scope.worktree);
  const named = spelled === option ? `${option} ${v}` : `${spelled}=${v}`;
  if (!cwdInside(where, scope.worktree)) {
    return refusal('outside_worktree', '', `\`${named}\` points at ${describeCwd(where)}, outside ${scope.worktree}`);
  }
  const components = v.split('/').filter((c) => c !== '' && c !== '.');
  const through = option === '--git-dir' ? components.slice(0, -1) : components;
  if (through.includes('.git')) {
    return refusal('outside_worktree', '', `\`${named}\` goes through \`.git\`, which in a linked worktree leads into the shared repository`);
  }
  // `dir/..` is the parent of wherever `dir` really is: if `dir` is a link, that is not the lexical parent.
  if (components.some((c, k) => c === '..' && k > 0 && components[k - 1] !== '..')) {
    return refusal('outside_worktree', '', `\`${named}\` climbs out of a directory with \`..\`; if that directory is a link, git lands elsewhere`);
  }
  return where;
}

// `-c` keys that only change presentation or identity. Everything else is refused: config can redirect the
// repository (core.worktree, core.bare), remotes (url.*.insteadOf, remote.*) or run programs.
const CONFIG_ALLOW = [
  /^user\.(name|email|signingkey|usecommitdate)$/,
  /^(author|committer)\.(name|email)$/,
  /^color\./,
  /^column\./,
  /^advice\./,
  /^core\.(quotepath|abbrev|autocrlf|safecrlf|eol|filemode|whitespace|commentchar|commentstring|precomposeunicode|longpaths|checkstat|trustctime|untrackedcache|preloadindex)$/,
  /^(commit|tag)\.(gpgsign|verbose|cleanup|status|sort)$/,
  /^log\.(date|decorate|abbrevcommit|follow|graphcolors|showroot|showsignature|mailmap|excludedecoration|initialdecorationset|diffmerges)$/,
  /^format\.(pretty|numbered|signoff|coverletter|suffix|subjectprefix|useautobase|thread|notes|headers|to|cc|from|signature|mboxrd|filenamemaxlength|forceinbodyfrom)$/,
  /^diff\.(noprefix|mnemonicprefix|renames|renamelimit|algorithm|context|interhunkcontext|indentheuristic|colormoved|colormovedws|relative|statgraphwidth|statnamewidth|submodule|ignoresubmodules|wserrorhighlight|suppressblankempty|dirstat|orderfile|srcprefix|dstprefix|autorefreshindex)$/,
  /^merge\.(conflictstyle|renames|renamelimit|stat|log|verbosity)$/,
  /^status\./,
  /^blame\./,
  /^grep\.(linenumber|column|patterntype|extendedregexp|threads|fullname|fallbacktonoindex)$/,
  /^init\.defaultbranch$/,
  /^i18n\./,
  /^gc\.auto$/,
  /^maintenance\.auto$/,
  /^(fetch|submodule)\.(parallel|writecommitgraph|showforcedupdates|recursesubmodules)$/,
  /^pack\.threads$/,
];

// Keys that run programs or load more config: refused with the stronger reason.
const CONFIG_EXEC = [
  /^(alias|include|includeif|filter|credential|protocol|pager|difftool|mergetool|sendemail|instaweb|browser|man|gpg|trace2)\./,
  /\.(command|cmd|textconv|driver|program|helper|hookspath|sshcommand|editor|pager|fsmonitor|askpass|gitproxy|uploadpack|receivepack|packobjectshook|external|difffilter|alternaterefscommand|proxy|procreceiverefs)$/,
  /^core\.(hookspath|sshcommand|editor|pager|fsmonitor|askpass|gitproxy|alternaterefscommand)$/,
  /^sequence\.editor$/,
  /^(uploadpack|receive)\./,
  /^ssh\./,
];

/** Section and variable names are case-insensitive; a subsection (between them) is not. */
function normalizeConfigKey(rawKey: string): string {
  const parts = rawKey.split('.');
  return parts.length <= 2 ? rawKey.toLowerCase() : [parts[0].toLowerCase(), ...parts.slice(1, -1), parts[parts.length - 1].toLowerCase()].join('.');
}

function configOverride(kv: Word, option: string): { reason: 'git_config_exec' | 'git_config_override' | 'dynamic_argument'; why: string } | undefined {
  const text = kv.value ?? kv.prefix;
  const eq = text.indexOf('=');
  if (kv.value === undefined && eq < 0) return { reason: 'dynamic_argument', why: `the \`${option}\` key \`${kv.text}\` is computed at run time` };
  const rawKey = eq < 0 ? text : text.slice(0, eq);
  const key = normalizeConfigKey(rawKey);
  if (CONFIG_EXEC.some((re) => re.test(key))) {
    return { reason: 'git_config_exec', why: `\`${option} ${rawKey}=…\` can make git run a program (or load more config)` };
  }
  if (!CONFIG_ALLOW.some((re) => re.test(key))) {
    return { reason: 'git_config_override', why: `\`${option} ${rawKey}\` is not in the guard's allowlist of harmless config keys` };
  }
  return undefined;
}

interface RuleInput {
  readonly args: readonly Word[];
  readonly trailingDynamic: boolean;
  readonly cwd: Cwd;
  readonly scope: GitScope;
  readonly sub: string;
  readonly deny: (reason: Parameters<typeof refusal>[0], why: string, instead?: string) => Refusal;
  readonly unsure?: (why: string) => void;
  readonly claim?: GitCall['claim'];
  readonly readCode?: GitCall['readCode'];
}
type Rule = (input: RuleInput) => Verdict;

/** Parses with `specs`; unknown, ambiguous or computed options refuse. */
function strict(input: RuleInput, specs: readonly OptSpec[]): Parsed | Refusal {
  const result: ParseResult = parseOptions(input.args, specs);
  if (!result.ok) {
    const t = describeWord(result.token);
    switch (result.problem) {
      case 'dynamic':
        return input.deny('dynamic_argument', `\`${result.token.text}\` in \`git ${input.sub}\` is computed at run time and may be an option or a ref`);
      case 'ambiguous':
        return input.deny('unknown_git_option', `\`${t}\` is an ambiguous abbreviation for \`git ${input.sub}\``);
      case 'missing_value':
        return input.deny('unknown_git_option', `\`${t}\` needs a value`);
      default:
        return input.deny('unknown_git_option', `\`${t}\` is not an option of \`git ${input.sub}\` the guard knows`);
    }
  }
  return result.parsed;
}

const isRefusal = (x: unknown): x is Refusal => typeof x === 'object' && x !== null && 'reason' in x && 'why' in x;

/** Words that select refs must be literal. */
function literalOperands(input: RuleInput, words: readonly Word[], what: string): string[] | Refusal {
  const out: string[] = [];
  for (const w of words) {
    const v = exactValue(w);
    if (v === undefined) return input.deny('dynamic_argument', `the ${what} \`${w.text}\` in \`git ${input.sub}\` is computed at run time`);
    out.push(v);
  }
  return out;
}

function noTrailing(input: RuleInput): Verdict {
  if (input.trailingDynamic) return input.deny('dynamic_argument', `\`git ${input.sub}\` gets more arguments from input at run time`);
  return undefined;
}

function writeTarget(input: RuleInput, w: Word, what: string): Verdict {
  const verdict = checkWriteTarget(w, input.cwd, input.scope.worktree);
  if (verdict.ok) return undefined;
  const reason = verdict.kind === 'metadata' ? 'git_metadata_write' : verdict.kind === 'dynamic' ? 'dynamic_argument' : 'outside_worktree';
  return input.deny(reason, `\`git ${input.sub}\` ${what}: ${verdict.detail}`);
}

const isBranch = (name: string, scope: GitScope) => name === scope.branch || name === `refs/heads/${scope.branch}`;

// ---------------------------------------------------------------------------------------------------------------
// Subcommands that read, or write only this worktree's files and index, with no option that escapes it.

const free: Rule = () => undefined;

/** What a subcommand's options can do besides reading and writing this worktree: its option table, by effect. */
interface Effects {
  /** Long options whose value is a file or directory git writes; any abbreviation that could mean one counts. */
  readonly writes?: readonly string[];
  /** Short options whose value (attached or next) is a file or directory git writes. */
  readonly writeShort?: string;
  /** Written paths git takes relative to the top of the worktree (`apply --directory`), not the current directory. */
  readonly fromTop?: readonly string[];
  /** Long options that name a program git runs; any abbreviation that could mean one counts. */
  readonly exec?: readonly string[];
  readonly execShort?: string;
  /** Options that take the next word as their value, so that word is data (`--author --output=x` searches). */
  readonly valueTakers?: readonly string[];
}

/**
 * Commands whose options are not fully modelled but whose effects are: every word before `--` that could be (an
 * abbreviation of) a writing or program-running option is checked, a short cluster is read letter by letter, and
 * a computed word that could be such an option is refused. An unknown option is git's to reject, never a way out:
 * only options that read remain unlisted.
 */
function watched(effects: Effects): Rule {
  const writes = effects.writes ?? [];
  const exec = effects.exec ?? [];
  const takers = new Set(effects.valueTakers ?? []);
  const couldMean = (names: readonly string[], name: string) => name.length > 0 && names.find((o) => o.startsWith(name));
  return (input) => {
    const args = input.args;
    const fromInput = () =>
      input.deny('dynamic_argument', `\`git ${input.sub}\` gets more arguments from input at run time; one could be a file to write or a program to run`);
    const missing = () => (input.trailingDynamic ? fromInput() : undefined);
    const target = (option: string, value: Word): Verdict => {
      const bad = writeTarget(input, value, `writes \`${value.text}\` (${option})`);
      if (bad || !effects.fromTop?.includes(option) || input.cwd.kind !== 'known' || input.cwd.path === input.scope.worktree) return bad;
      return writeTarget(
        { ...input, cwd: { kind: 'known', path: input.scope.worktree } },
        value,
        `writes under \`${value.text}\` (${option}, from the top of the worktree)`,
      );
    };
    for (let i = 0; i < args.length; i++) {
      const w = args[i];
      const v = w.value;
      if (v === '--') return undefined;
      if (v === undefined) {
        const p = w.prefix;
        if (p.startsWith('--') && p.includes('=') && !w.splits) {
          const name = p.slice(2, p.indexOf('='));
          if (couldMean(writes, name) || couldMean(exec, name)) {
            return input.deny('dynamic_argument', `\`${w.text}\`: the file or program for \`git ${input.sub}\` is computed at run time`);
          }
          continue;
        }
        if (p.length > 0 && !p.startsWith('-') && !w.splits) continue;
        return input.deny('dynamic_argument', `\`${w.text}\` in \`git ${input.sub}\` is computed at run time and may be an option (e.g. --output=<file>)`);
      }
      if (v.startsWith('--') && v.length > 2) {
        const eq = v.indexOf('=');
        const name = eq < 0 ? v.slice(2) : v.slice(2, eq);
        const program = couldMean(exec, name);
        if (program) return input.deny('git_runs_program', `\`${v}\` (--${program}) makes \`git ${input.sub}\` run a program`);
        const written = couldMean(writes, name);
        if (written) {
          const value = eq >= 0 ? { ...w, value: v.slice(eq + 1), prefix: v.slice(eq + 1), text: v.slice(eq + 1) } : args[++i];
          if (!value) return missing();
          const bad = target(written, value);
          if (bad) return bad;
          continue;
        }
        if (eq < 0 && takers.has(name)) i++;
        continue;
      }
      if (v.startsWith('-') && v.length > 1) {
        for (let j = 1; j < v.length; j++) {
          const c = v[j];
          if (effects.execShort?.includes(c)) return input.deny('git_runs_program', `\`-${c}\` in \`${v}\` makes \`git ${input.sub}\` run a program`);
          const writer = effects.writeShort?.includes(c);
          if (!writer && !takers.has(`-${c}`)) continue;
          const rest = v.slice(j + 1);
          const value = rest ? { ...w, value: rest, prefix: rest, text: rest } : args[++i];
          if (writer) {
            if (!value) return missing();
            const bad = target(`-${c}`, value);
            if (bad) return bad;
          }
          break;
        }
      }
    }
    if (!input.trailingDynamic || (writes.length === 0 && exec.length === 0 && !effects.writeShort && !effects.execShort)) return undefined;
    // Words from input can only add options of this table; when the only effect is a write, the kernel layer
    // confines where it lands, so the guard says it could not judge instead of refusing.
    if (input.unsure && exec.length === 0 && !effects.execShort) {
      input.unsure(
        `\`git ${input.sub}\` gets more arguments from input at run time; the guard could not check them for --${writes[0] ?? 'output'}=<file>, the sandbox confines where it writes`,
      );
      return undefined;
    }
    return fromInput();
  };
}

const LOG_VALUES = [
  '-n',
  '-S',
  '-G',
  '-L',
  '--max-count',
  '--skip',
  '--since',
  '--after',
  '--until',
  '--before',
  '--author',
  '--committer',
  '--grep',
  '--min-parents',
  '--max-parents',
  '--since-as-filter',
];
const logFamily = watched({ writes: ['output'], valueTakers: LOG_VALUES.map((o) => o.replace(/^--/, '')).concat(LOG_VALUES) });

// ---------------------------------------------------------------------------------------------------------------
// Rules for the subcommands that can move refs, switch the worktree or touch shared state.

const integration: Rule = (input) => {
  const { args, sub } = input;
  if (['merge', 'rebase'].includes(sub) && args.length === 1 && args[0].value === '--abort' && !input.trailingDynamic) return undefined;
  const abort = ['merge', 'rebase'].includes(sub) ? ` Only \`git ${sub} --abort\` is allowed.` : '';
  return input.deny('integration_policy', `\`git ${sub}\` integrates or rewrites history; in an isolated child that is the orchestrator's job.${abort}`);
};

/** A literal revision that surely names this worktree's HEAD (`HEAD`, `@`, the own branch), so nothing moves. */
const isHeadItself = (rev: string, scope: { branch: string }) => isOwnHead(rev, scope) || rev === `refs/heads/${scope.branch}`;

const RESET: OptSpec[] = [
  { key: 'soft', long: ['soft'] },
  { key: 'mixed', long: ['mixed'] },
  { key: 'hard', long: ['hard'] },
  { key: 'merge', long: ['merge'] },
  { key: 'keep', long: ['keep'] },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'patch', short: 'p', long: ['patch'] },
  { key: 'intent', short: 'N', long: ['intent-to-add'] },
  { key: 'refresh', long: ['refresh'] },
  { key: 'recurse', long: ['recurse-submodules'], arg: 'optional' },
  { key: 'pathspec-from-file', long: ['pathspec-from-file'], arg: 'required' },
  { key: 'pathspec-file-nul', long: ['pathspec-file-nul'] },
];

/**
 * `git reset`: with paths (or a pathspec file) it sets index entries and moves nothing; without, it moves the
 * child's branch to a commit — allowed when the host finds that commit on the child's own history (a rewind, or
 * commits no other ref has), which a `move` claim asks it to check before the command runs.
 */
const reset: Rule = (input) => {
  const p = strict(input, RESET);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  const operands = literalOperands(input, p.positionals, 'commit or path');
  if (isRefusal(operands)) return operands;
  const mode = ['soft', 'mixed', 'hard', 'merge', 'keep'].some((k) => has(p, k));
  // `git reset [<tree-ish>] -- <paths>` and `git reset <tree-ish> <paths>…` only read the tree-ish; a `--` with no
  // path after it (`git reset --hard main --`) is no path reset: the commit before it moves the branch.
  if (p.afterDashDash.length > 0 || has(p, 'pathspec-from-file') || has(p, 'patch') || (operands.length >= 2 && !mode)) return undefined;
  if (operands.length === 0 || isHeadItself(operands[0], input.scope)) return undefined;
  if (operands.length > 1) return undefined; // git refuses a mode with paths
  if (!input.claim) {
    return input.deny(
      'integration_policy',
      `\`git reset ${operands[0]}\` moves ${input.scope.branch}, and here the guard cannot have the repository check where to`,
    );
  }
  input.claim({ kind: 'move', target: operands[0] });
  return undefined;
};

const REBASE: OptSpec[] = [
  { key: 'onto', long: ['onto'], arg: 'required' },
  { key: 'keep-base', long: ['keep-base'] },
  { key: 'root', long: ['root'], danger: true },
  { key: 'continue', long: ['continue'] },
  { key: 'skip', long: ['skip'] },
  { key: 'abort', long: ['abort'] },
  { key: 'quit', long: ['quit'] },
  { key: 'edit-todo', long: ['edit-todo'] },
  { key: 'show-current-patch', long: ['show-current-patch'] },
  { key: 'interactive', short: 'i', long: ['interactive'] },
  { key: 'exec', short: 'x', long: ['exec'], arg: 'required' },
  { key: 'update-refs', long: ['update-refs'], danger: true },
  { key: 'autosquash', long: ['autosquash'] },
  { key: 'autostash', long: ['autostash'] },
  { key: 'merge', short: 'm', long: ['merge'] },
  { key: 'apply', long: ['apply'] },
  { key: 'strategy', short: 's', long: ['strategy'], arg: 'required' },
  { key: 'strategy-option', short: 'X', long: ['strategy-option'], arg: 'required' },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'verbose', short: 'v', long: ['verbose'] },
  { key: 'stat', long: ['stat'] },
  { key: 'no-stat', short: 'n' },
  { key: 'signoff', long: ['signoff'] },
  { key: 'verify', long: ['verify'] },
  { key: 'committer-date', long: ['committer-date-is-author-date'] },
  { key: 'ignore-date', long: ['ignore-date', 'reset-author-date'] },
  { key: 'ignore-whitespace', long: ['ignore-whitespace'] },
  { key: 'whitespace', long: ['whitespace'], arg: 'required' },
  { key: 'context', short: 'C', arg: 'required' },
  { key: 'empty', long: ['empty'], arg: 'required' },
  { key: 'keep-empty', short: 'k', long: ['keep-empty'] },
  { key: 'reapply', long: ['reapply-cherry-picks'] },
  { key: 'allow-empty-message', long: ['allow-empty-message'] },
  { key: 'rebase-merges', short: 'r', long: ['rebase-merges'], arg: 'optional' },
  { key: 'fork-point', long: ['fork-point'] },
  { key: 'gpg-sign', short: 'S', long: ['gpg-sign'], arg: 'optional' },
  { key: 'force-rebase', short: 'f', long: ['force-rebase', 'no-ff'] },
  { key: 'rerere', long: ['rerere-autoupdate'] },
  { key: 'reschedule', long: ['reschedule-failed-exec'] },
];

/** The sequencer's own verbs: they go on with (or drop) the rebase already in progress. */
const REBASE_ACTIONS = ['continue', 'skip', 'abort', 'quit', 'edit-todo', 'show-current-patch'];

/**
 * `git rebase` of the child's own commits (squash, reorder, reword, drop; `--onto` within its own history): allowed
 * when the host finds that the commits it rewrites and the commit it replays them onto are the child's own, which a
 * `rewrite` claim asks it to check before the command runs. A rebase onto another branch is integration: refused
 * then, and caught after the command by the same check on the branch's effect. `--root` rewrites commits below the
 * branch's base, `--update-refs` moves other branches, and a branch argument switches this worktree first.
 */
const rebase: Rule = (input) => {
  const p = strict(input, REBASE);
  if (isRefusal(p)) return p;
  const { scope } = input;
  const bad = noTrailing(input);
  if (bad) return bad;
  if (has(p, 'update-refs')) return input.deny('moves_other_ref', '`git rebase --update-refs` moves every other branch that points into the rebased commits');
  if (has(p, 'root'))
    return input.deny('integration_policy', `\`git rebase --root\` rewrites commits below ${scope.branch}'s base, which other branches share`);
  const operands = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'revision');
  if (isRefusal(operands)) return operands;
  if (operands.length > 2) return input.deny('unknown_git_option', '`git rebase` takes at most an upstream and a branch');
  if (operands.length === 2 && !isHeadItself(operands[1], scope)) {
    return input.deny(
      'switches_branch',
      `\`git rebase ${operands.join(' ')}\` switches this worktree to \`${operands[1]}\` first; it must stay on ${scope.branch}`,
    );
  }
  // `-x <cmd>` runs through the shell in the worktree after each commit: read like `bash -c`.
  for (const cmd of optValues(p, 'exec')) {
    const code = exactValue(cmd);
    if (code === undefined) return input.deny('dynamic_argument', `the \`git rebase -x\` command \`${cmd.text}\` is computed at run time`);
    if (!input.readCode) return input.deny('unresolved_launcher', '`git rebase -x` runs a command the guard cannot read here');
    const bad = input.readCode(code, 'git rebase -x');
    if (bad) return bad;
  }
  if (has(p, 'strategy')) input.unsure?.('`git rebase -s <strategy>` runs the merge strategy program `git-merge-<strategy>`');
  const action = REBASE_ACTIONS.find((a) => has(p, a));
  if (action === 'abort' || action === 'quit' || action === 'show-current-patch') return undefined;
  if (!input.claim) {
    return input.deny(
      'integration_policy',
      '`git rebase` rewrites history, and here the guard cannot have the repository check that it stays on the own branch',
    );
  }
  if (action) {
    input.claim({ kind: 'rewrite' });
    return undefined;
  }
  const upstream = operands[0];
  if (upstream === undefined) {
    return input.deny(
      'integration_policy',
      `\`git rebase\` without an upstream rebases onto the configured upstream, another branch; name the commit of ${scope.branch} to rebase onto (e.g. \`git rebase -i HEAD~3\`)`,
    );
  }
  const onto = optValues(p, 'onto').map((w) => exactValue(w));
  if (onto.some((v) => v === undefined)) return input.deny('dynamic_argument', 'the `--onto` commit of `git rebase` is computed at run time');
  input.claim({ kind: 'rewrite', upstream, ...(has(p, 'keep-base') ? {} : { onto: onto[onto.length - 1] ?? upstream }) });
  return undefined;
};

const CHECKOUT: OptSpec[] = [
  { key: 'create', short: 'b', arg: 'required' },
  { key: 'force-create', short: 'B', arg: 'required' },
  { key: 'orphan', long: ['orphan'], arg: 'required' },
  { key: 'detach', short: 'd', long: ['detach'], danger: true },
  { key: 'ignore-other', long: ['ignore-other-worktrees'], danger: true },
  { key: 'force', short: 'f', long: ['force'] },
  { key: 'merge', short: 'm', long: ['merge'] },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'patch', short: 'p', long: ['patch'] },
  { key: 'ours', long: ['ours'] },
  { key: 'theirs', long: ['theirs'] },
  { key: 'reflog', short: 'l' },
  { key: 'progress', long: ['progress'] },
  { key: 'overlay', long: ['overlay'] },
  { key: 'guess', long: ['guess'] },
  { key: 'overwrite-ignore', long: ['overwrite-ignore'] },
  { key: 'recurse', long: ['recurse-submodules'], arg: 'optional' },
  { key: 'skip-bits', long: ['ignore-skip-worktree-bits'] },
  { key: 'conflict', long: ['conflict'], arg: 'required' },
  { key: 'track', short: 't', long: ['track'], arg: 'optional' },
  { key: 'pathspec-from-file', long: ['pathspec-from-file'], arg: 'required' },
  { key: 'pathspec-file-nul', long: ['pathspec-file-nul'] },
  { key: 'unified', short: 'U', long: ['unified'], arg: 'required' },
  { key: 'inter-hunk', long: ['inter-hunk-context'], arg: 'required' },
];

/** A word git can only take as a path, never as a branch or commit. */
function surelyPath(v: string): boolean {
  return v.startsWith('.') || v.startsWith(':') || /[*?[\\]/.test(v) || v.includes('/.') || v.endsWith('/');
}

/** A name that is this worktree's own HEAD: checking it out switches nothing. */
const isOwnHead = (name: string, scope: { branch: string }) => name === scope.branch || name === 'HEAD' || name === '@';

/**
 * A checkout or switch of the branch this worktree is on: git writes HEAD again with the value it has, which the
 * sandbox allows only for a command with a `reattach` claim (HEAD is read-only to the rest). `HEAD` and `@` write
 * nothing.
 */
function reattach(input: RuleInput, name: string): Verdict {
  if (name === input.scope.branch) input.claim?.({ kind: 'reattach' });
  return undefined;
}

const checkout: Rule = (input) => {
  const p = strict(input, CHECKOUT);
  if (isRefusal(p)) return p;
  const { scope } = input;
  const forceCreate = optValues(p, 'force-create');
  if (has(p, 'ignore-other')) {
    return input.deny('moves_other_ref', '`--ignore-other-worktrees` checks out a branch another worktree has checked out');
  }
  for (const name of forceCreate) {
    const v = exactValue(name);
    if (v !== undefined && isBranch(v, scope)) {
      return input.deny('integration_policy', `\`-B ${v}\` resets ${scope.branch} to another commit (a reset)`);
    }
    return input.deny('moves_other_ref', `\`-B ${name.text}\` creates or resets another branch and switches to it`);
  }
  if (has(p, 'create') || has(p, 'orphan')) {
    return input.deny(
      'switches_branch',
      `\`git checkout ${has(p, 'orphan') ? '--orphan' : '-b'}\` creates a new branch and moves this worktree off ${scope.branch}`,
    );
  }
  if (has(p, 'detach')) return input.deny('switches_branch', `\`--detach\` moves this worktree off ${scope.branch}`);
  // With `--` (or a pathspec file) the words before it name at most a tree to take files from — as long as a path
  // follows: `git checkout <name> --` with nothing after `--` is how git spells a switch to <name>.
  if (p.dashDash || has(p, 'pathspec-from-file')) {
    const operands = literalOperands(input, p.positionals, 'tree');
    if (isRefusal(operands)) return operands;
    if (has(p, 'pathspec-from-file') || operands.length !== 1 || isOwnHead(operands[0], scope)) return undefined;
    const name = operands[0];
    const paths = p.afterDashDash;
    if (paths.length === 0 && !input.trailingDynamic) {
      return input.deny(
        'switches_branch',
        `\`git checkout ${name} --\` names no path after \`--\`, so git reads \`${name}\` as the branch or commit to switch to; ` +
          `this worktree must stay on ${scope.branch}. For files from ${name}, name them after \`--\`: \`git checkout ${name} -- <path>\`.`,
      );
    }
    if (paths.every((w) => w.splits) && (paths.length > 0 || input.trailingDynamic)) {
      return input.deny(
        'dynamic_argument',
        `the paths after \`git checkout ${name} --\` come from input at run time and may be none, which would switch this worktree ` +
          `to \`${name}\`; quote the expansion ("$FILES") or name a path.`,
      );
    }
    return undefined;
  }
  if (input.trailingDynamic) {
    return input.deny('dynamic_argument', '`git checkout` without `--` gets words from input at run time: one of them could be a branch');
  }
  const operands = literalOperands(input, p.positionals, 'branch or path');
  if (isRefusal(operands)) return operands;
  if (operands.length === 0) return undefined;
  // Two or more operands: `<tree-ish> <pathspec>…` or paths only; git never switches branches then.
  if (operands.length >= 2) return undefined;
  const only = operands[0];
  if (isOwnHead(only, scope)) return reattach(input, only);
  if (surelyPath(only)) return undefined;
  return input.deny(
    'switches_branch',
    `\`git checkout ${only}\` would switch this worktree to \`${only}\` (or detach it) if that names a branch or commit; ` +
      `this worktree must stay on ${scope.branch}. For a file, write \`git checkout -- ${only}\` or \`git restore ${only}\`.`,
  );
};

const SWITCH: OptSpec[] = [
  { key: 'create', short: 'c', long: ['create'], arg: 'required' },
  { key: 'force-create', short: 'C', long: ['force-create'], arg: 'required' },
  { key: 'orphan', long: ['orphan'], arg: 'required' },
  { key: 'detach', short: 'd', long: ['detach'], danger: true },
  { key: 'ignore-other', long: ['ignore-other-worktrees'], danger: true },
  { key: 'force', short: 'f', long: ['force', 'discard-changes'] },
  { key: 'merge', short: 'm', long: ['merge'] },
  { key: 'conflict', long: ['conflict'], arg: 'required' },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'progress', long: ['progress'] },
  { key: 'track', short: 't', long: ['track'], arg: 'optional' },
  { key: 'guess', long: ['guess'] },
  { key: 'recurse', long: ['recurse-submodules'], arg: 'optional' },
  { key: 'overwrite-ignore', long: ['overwrite-ignore'] },
];

const switchRule: Rule = (input) => {
  const p = strict(input, SWITCH);
  if (isRefusal(p)) return p;
  const { scope } = input;
  if (has(p, 'ignore-other')) return input.deny('moves_other_ref', '`--ignore-other-worktrees` switches to a branch another worktree has checked out');
  if (has(p, 'force-create')) return input.deny('moves_other_ref', '`git switch -C` creates or resets a branch and switches to it');
  if (has(p, 'create') || has(p, 'orphan')) return input.deny('switches_branch', `\`git switch -c/--orphan\` moves this worktree off ${scope.branch}`);
  if (has(p, 'detach')) return input.deny('switches_branch', `\`git switch --detach\` moves this worktree off ${scope.branch}`);
  const bad = noTrailing(input);
  if (bad) return bad;
  const operands = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'branch');
  if (isRefusal(operands)) return operands;
  if (operands.length === 1 && operands[0] === scope.branch) return reattach(input, operands[0]);
  if (operands.length === 0) return undefined;
  return input.deny('switches_branch', `\`git switch ${operands.join(' ')}\` moves this worktree off ${scope.branch}`);
};

const BRANCH: OptSpec[] = [
  { key: 'delete', short: 'd', long: ['delete'], danger: true },
  { key: 'force-delete', short: 'D' },
  { key: 'move', short: 'm', long: ['move'], danger: true },
  { key: 'force-move', short: 'M' },
  { key: 'copy', short: 'c', long: ['copy'], danger: true },
  { key: 'force-copy', short: 'C' },
  { key: 'force', short: 'f', long: ['force'], danger: true },
  { key: 'set-upstream-to', short: 'u', long: ['set-upstream-to'], arg: 'required' },
  { key: 'unset-upstream', long: ['unset-upstream'] },
  { key: 'edit-description', long: ['edit-description'] },
  { key: 'track', short: 't', long: ['track'], arg: 'optional' },
  { key: 'recurse', long: ['recurse-submodules'] },
  { key: 'create-reflog', long: ['create-reflog'] },
  { key: 'list', short: 'l', long: ['list'] },
  { key: 'all', short: 'a', long: ['all'] },
  { key: 'remotes', short: 'r', long: ['remotes'] },
  { key: 'verbose', short: 'v', long: ['verbose'] },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'show-current', long: ['show-current'] },
  { key: 'contains', long: ['contains'], arg: 'lastarg' },
  { key: 'no-contains', long: ['no-contains'], arg: 'lastarg' },
  { key: 'merged', long: ['merged'], arg: 'lastarg' },
  { key: 'no-merged', long: ['no-merged'], arg: 'lastarg' },
  { key: 'points-at', long: ['points-at'], arg: 'required' },
  { key: 'sort', long: ['sort'], arg: 'required' },
  { key: 'format', long: ['format'], arg: 'required' },
  { key: 'column', long: ['column'], arg: 'optional' },
  { key: 'color', long: ['color'], arg: 'optional' },
  { key: 'ignore-case', short: 'i', long: ['ignore-case'] },
  { key: 'abbrev', long: ['abbrev'], arg: 'optional' },
  { key: 'omit-empty', long: ['omit-empty'] },
];

const branch: Rule = (input) => {
  const p = strict(input, BRANCH);
  if (isRefusal(p)) return p;
  const { scope } = input;
  const bad = noTrailing(input);
  if (bad) return bad;
  const writes = ['delete', 'force-delete', 'move', 'force-move', 'copy', 'force-copy', 'force'].filter((k) => has(p, k));
  if (writes.length > 0) {
    return input.deny(
      'moves_other_ref',
      `\`git branch\` with ${writes.map((k) => `--${k}`).join(', ')} deletes, renames, copies or force-moves branches; only commits may move ${scope.branch}`,
    );
  }
  const names = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'branch name');
  if (isRefusal(names)) return names;
  if (has(p, 'set-upstream-to') || has(p, 'unset-upstream') || has(p, 'edit-description')) {
    if (names.length === 0 || (names.length === 1 && isBranch(names[0], scope))) return undefined;
    return input.deny('shared_state', `changes the configuration of another branch (${names.join(', ')}) in the shared config`);
  }
  if (has(p, 'show-current')) return undefined;
  const listing = ['list', 'contains', 'no-contains', 'merged', 'no-merged', 'points-at'].some((k) => has(p, k));
  if (listing || names.length === 0) return undefined;
  return input.deny('moves_other_ref', `\`git branch ${names.join(' ')}\` creates a branch: a new shared ref other than ${scope.branch}`);
};

const PUSH: OptSpec[] = [
  { key: 'all', long: ['all', 'branches'], danger: true },
  { key: 'mirror', long: ['mirror'], danger: true },
  { key: 'tags', long: ['tags'], danger: true },
  { key: 'follow-tags', long: ['follow-tags'], danger: true },
  { key: 'delete', short: 'd', long: ['delete'], danger: true },
  { key: 'prune', long: ['prune'], danger: true },
  { key: 'receive-pack', long: ['receive-pack', 'exec'], arg: 'required', danger: true },
  { key: 'dry-run', short: 'n', long: ['dry-run'] },
  { key: 'porcelain', long: ['porcelain'] },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'verbose', short: 'v', long: ['verbose'] },
  { key: 'progress', long: ['progress'] },
  { key: 'force', short: 'f', long: ['force'] },
  { key: 'force-with-lease', long: ['force-with-lease'], arg: 'optional' },
  { key: 'force-if-includes', long: ['force-if-includes'] },
  { key: 'repo', long: ['repo'], arg: 'required' },
  { key: 'set-upstream', short: 'u', long: ['set-upstream'] },
  { key: 'thin', long: ['thin'] },
  { key: 'recurse', long: ['recurse-submodules'], arg: 'required' },
  { key: 'verify', long: ['verify'] },
  { key: 'signed', long: ['signed'], arg: 'optional' },
  { key: 'atomic', long: ['atomic'] },
  { key: 'push-option', short: 'o', long: ['push-option'], arg: 'required' },
  { key: 'ipv4', short: '4', long: ['ipv4'] },
  { key: 'ipv6', short: '6', long: ['ipv6'] },
];

/** `<transport>::<address>` runs the remote helper `git-remote-<transport>` (and `ext::` runs any command). */
function remoteHelperProblem(v: string): string | undefined {
  return /^[A-Za-z][A-Za-z0-9+.-]*::/.test(v)
    ? `\`${v}\` makes git run the remote helper \`git-remote-${v.slice(0, v.indexOf('::'))}\` (ext:: runs any command)`
    : undefined;
}

/** A repository argument that is a local path may be this very repository (its shared ref store). */
function localRepository(v: string): boolean {
  return v === '.' || v === '..' || v.startsWith('/') || v.startsWith('./') || v.startsWith('../') || v.startsWith('file:') || v.startsWith('~');
}

const push: Rule = (input) => {
  const p = strict(input, PUSH);
  if (isRefusal(p)) return p;
  const { scope } = input;
  if (has(p, 'receive-pack')) return input.deny('git_runs_program', '`--receive-pack`/`--exec` runs a program for the push');
  for (const k of ['all', 'mirror', 'tags', 'follow-tags', 'delete', 'prune']) {
    if (has(p, k)) return input.deny('moves_other_ref', `\`git push --${k}\` updates or deletes remote refs other than ${scope.branch}`);
  }
  for (const r of optValues(p, 'recurse')) {
    const v = exactValue(r);
    if (v !== 'check' && v !== 'no') return input.deny('moves_other_ref', `\`--recurse-submodules=${v ?? r.text}\` pushes other repositories' refs`);
  }
  const bad = noTrailing(input);
  if (bad) return bad;
  const operands = [...optValues(p, 'repo'), ...p.positionals, ...p.afterDashDash];
  const words = literalOperands(input, operands, 'repository or refspec');
  if (isRefusal(words)) return words;
  if (words.length === 0) {
    return input.deny('implicit_target', '`git push` without a refspec pushes whatever push.default / remote.<name>.push select');
  }
  const [repo, ...refspecs] = words;
  const helper = remoteHelperProblem(repo);
  if (helper) return input.deny('git_runs_program', helper);
  if (localRepository(repo)) {
    return input.deny('moves_other_ref', `pushing into the local repository \`${repo}\` writes refs in a shared ref store`);
  }
  if (refspecs.length === 0) {
    return input.deny('implicit_target', `\`git push ${repo}\` without a refspec pushes whatever push.default / remote.${repo}.push select`);
  }
  for (let k = 0; k < refspecs.length; k++) {
    const spec = refspecs[k];
    if (spec === 'tag') return input.deny('moves_other_ref', '`git push <remote> tag <name>` pushes a tag (a shared ref)');
    const problem = pushRefspecProblem(spec, scope);
    if (problem) return input.deny('moves_other_ref', `refspec \`${spec}\`: ${problem}`);
  }
  return undefined;
};

/** Why a push refspec may not be pushed by this session, or undefined when it only updates B. */
function pushRefspecProblem(spec: string, scope: GitScope): string | undefined {
  let s = spec;
  if (s.startsWith('^')) return 'negative refspecs are not for push';
  if (s.startsWith('+')) s = s.slice(1);
  if (s.includes('*')) return 'wildcard refspecs push many refs';
  if (s === ':' || s === '') return 'the matching refspec pushes every branch with the same name on both sides';
  const colon = s.indexOf(':');
  const src = colon < 0 ? s : s.slice(0, colon);
  const dst = colon < 0 ? undefined : s.slice(colon + 1);
  if (dst === undefined) {
    if (src === 'HEAD' || src === '@' || isBranch(src, scope)) return undefined;
    return `pushes \`${src}\`; only ${scope.branch} (or HEAD while this worktree is on it) may be pushed`;
  }
  if (src === '') return `deletes the remote ref \`${dst}\``;
  if (isBranch(dst, scope)) return undefined;
  return `updates the remote ref \`${dst}\`; only ${scope.branch} may be pushed`;
}

const FETCH: OptSpec[] = [
  { key: 'update-head-ok', short: 'u', long: ['update-head-ok'], danger: true },
  { key: 'upload-pack', long: ['upload-pack'], arg: 'required', danger: true },
  { key: 'prune-tags', short: 'P', long: ['prune-tags'], danger: true },
  { key: 'stdin', long: ['stdin'], danger: true },
  { key: 'refmap', long: ['refmap'], arg: 'required', danger: true },
  { key: 'all', long: ['all'] },
  { key: 'append', short: 'a', long: ['append'] },
  { key: 'atomic', long: ['atomic'] },
  { key: 'depth', long: ['depth'], arg: 'required' },
  { key: 'deepen', long: ['deepen'], arg: 'required' },
  { key: 'shallow-since', long: ['shallow-since'], arg: 'required' },
  { key: 'shallow-exclude', long: ['shallow-exclude'], arg: 'required' },
  { key: 'unshallow', long: ['unshallow'] },
  { key: 'update-shallow', long: ['update-shallow'] },
  { key: 'negotiation-tip', long: ['negotiation-tip'], arg: 'required' },
  { key: 'negotiate-only', long: ['negotiate-only'] },
  { key: 'dry-run', long: ['dry-run'] },
  { key: 'porcelain', long: ['porcelain'] },
  { key: 'write-fetch-head', long: ['write-fetch-head'] },
  { key: 'force', short: 'f', long: ['force'] },
  { key: 'keep', short: 'k', long: ['keep'] },
  { key: 'multiple', long: ['multiple'] },
  { key: 'auto-maintenance', long: ['auto-maintenance', 'auto-gc'] },
  { key: 'write-commit-graph', long: ['write-commit-graph'] },
  { key: 'prefetch', long: ['prefetch'] },
  { key: 'prune', short: 'p', long: ['prune'] },
  { key: 'no-tags', short: 'n' },
  { key: 'tags', short: 't', long: ['tags'] },
  { key: 'refetch', long: ['refetch'] },
  { key: 'recurse', long: ['recurse-submodules'], arg: 'optional' },
  { key: 'jobs', short: 'j', long: ['jobs'], arg: 'required' },
  { key: 'set-upstream', long: ['set-upstream'] },
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'verbose', short: 'v', long: ['verbose'] },
  { key: 'progress', long: ['progress'] },
  { key: 'server-option', short: 'o', long: ['server-option'], arg: 'required' },
  { key: 'show-forced-updates', long: ['show-forced-updates'] },
  { key: 'ipv4', short: '4', long: ['ipv4'] },
  { key: 'ipv6', short: '6', long: ['ipv6'] },
  { key: 'filter', long: ['filter'], arg: 'required' },
];

const SHALLOW = ['depth', 'deepen', 'shallow-since', 'shallow-exclude', 'unshallow', 'update-shallow'];

/**
 * `git fetch` may write FETCH_HEAD, this session's own refs, and faithful remote-tracking copies: the remote's
 * `refs/heads/X` into `refs/remotes/<that remote>/X`, never another remote's namespace, a local branch, a tag or
 * a note. Without a refspec the remote's configured ones apply; the child cannot write that config, so they are
 * the operator's. `--prune` deletes only tracking refs whose branch the remote no longer has, which keeps the
 * copy faithful. Tag auto-following creates only tags absent locally (git ≥ 2.20 refuses to move an existing tag
 * without `--force`), so a plain fetch passes; `--tags`, tag refspecs and `--force` (which lets a remote
 * configured to fetch tags move them) do not. The shallow options rewrite `shallow` in the common directory.
 */
const fetch: Rule = (input) => {
  const p = strict(input, FETCH);
  if (isRefusal(p)) return p;
  if (has(p, 'update-head-ok')) return input.deny('moves_other_ref', '`--update-head-ok` lets fetch move a checked-out branch');
  if (has(p, 'upload-pack')) return input.deny('git_runs_program', '`--upload-pack` runs a program for the fetch');
  if (has(p, 'prune-tags')) return input.deny('moves_other_ref', '`--prune-tags` deletes local tags (shared refs)');
  if (has(p, 'tags'))
    return input.deny('moves_other_ref', '`git fetch --tags` writes every tag of the remote into refs/tags (shared refs), moving existing ones');
  const shallow = SHALLOW.find((k) => has(p, k));
  if (shallow) {
    return input.deny('shared_state', `\`git fetch --${shallow}\` rewrites \`shallow\` in the shared git directory, which changes history for every worktree`);
  }
  if (has(p, 'force') && !has(p, 'tags', true)) {
    return input.deny(
      'moves_other_ref',
      '`git fetch --force` lets refspecs and tag following move existing refs (tags too, when the remote is configured to fetch them)',
      'Drop `--force`, or add `--no-tags` and name remote-tracking refspecs.',
    );
  }
  if (has(p, 'stdin')) return input.deny('dynamic_argument', '`git fetch --stdin` reads its refspecs at run time');
  const bad = noTrailing(input);
  if (bad) return bad;
  const words = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'repository or refspec');
  if (isRefusal(words)) return words;
  for (const w of words) {
    const helper = remoteHelperProblem(w);
    if (helper) return input.deny('git_runs_program', helper);
  }
  const [repo, ...refspecs] = words;
  for (const m of optValues(p, 'refmap')) {
    const v = exactValue(m);
    if (v === undefined) return input.deny('dynamic_argument', `the refmap \`${m.text}\` is computed at run time`);
    if (v === '') continue;
    // Without a repository the refmap's remote is whichever is the default: its namespace cannot be checked.
    const problem = repo === undefined ? 'a refmap needs a named remote' : fetchRefspecProblem(v, repo, input.scope);
    if (problem) return input.deny('moves_other_ref', `\`--refmap=${v}\`: ${problem}`);
  }
  if (has(p, 'all') || has(p, 'multiple')) return undefined; // operands are remote names
  for (const spec of refspecs) {
    if (spec === 'tag') return input.deny('moves_other_ref', '`git fetch <remote> tag <name>` writes a local tag (a shared ref)');
    const problem = fetchRefspecProblem(spec, repo, input.scope);
    if (problem) return input.deny('moves_other_ref', `refspec \`${spec}\`: ${problem}`);
  }
  return undefined;
};

/**
 * Why a fetch refspec from `repo` may not run, or undefined when it writes only FETCH_HEAD, this session's own
 * refs, or the faithful remote-tracking copy (`[+][refs/heads/]X:refs/remotes/<repo>/X`, `*` in the same place).
 */
function fetchRefspecProblem(spec: string, repo: string, scope: GitScope): string | undefined {
  let s = spec;
  if (s.startsWith('^')) return undefined; // negative: only excludes
  if (s.startsWith('+')) s = s.slice(1);
  const colon = s.indexOf(':');
  if (colon < 0) return undefined;
  const src = s.slice(0, colon);
  const dst = s.slice(colon + 1);
  if (dst === '') return undefined;
  if (isBranch(dst, scope) || dst === `refs/remotes/${repo}/${scope.branch}`) {
    return undefined; // this session's own branch (git refuses to fetch into a checked-out branch) or its tracking ref
  }
  if (!dst.startsWith('refs/remotes/')) {
    return `writes the local ref \`${dst}\`; fetch may write only remote-tracking refs (refs/remotes/<remote>/…) or FETCH_HEAD`;
  }
  // Only a configured remote has a tracking namespace: a path or URL names none (`refs/remotes/../main/` is not one).
  if (localRepository(repo) || repo.includes(':')) return `writes \`${dst}\` from \`${repo}\`, which is a path or URL, not a remote with its own tracking refs`;
  const tracking = `refs/remotes/${repo}/`;
  const branchName = src.startsWith('refs/heads/')
    ? src.slice('refs/heads/'.length)
    : src.startsWith('refs/') || src === 'HEAD' || src === '@'
      ? undefined
      : src;
  if (!dst.startsWith(tracking) || branchName === undefined || dst.slice(tracking.length) !== branchName) {
    return `writes \`${dst}\` from \`${src}\` of \`${repo}\`; a remote-tracking ref may only copy the remote's own branch of the same name (refs/heads/X → ${tracking}X)`;
  }
  return undefined;
}

const stash: Rule = (input) => {
  const first = input.args[0];
  const v = first ? exactValue(first) : undefined;
  if (first && v === undefined) return input.deny('dynamic_argument', `the \`git stash\` action \`${first.text}\` is computed at run time`);
  if (v === 'list') return logFamily({ ...input, args: input.args.slice(1) });
  if (v === 'show') return logFamily({ ...input, args: input.args.slice(1) });
  if (v === 'create') return undefined;
  return input.deny(
    'shared_state',
    `\`git stash${v ? ` ${v}` : ''}\` uses refs/stash, which every worktree shares (other sessions' entries live there too)`,
    `To set work aside, commit it on {branch} (a WIP commit is fine). ${INTEGRATION_ROUTE}`,
  );
};

function actionRule(
  reads: readonly string[],
  defaultRead: boolean,
  deny: { reason: 'shared_state' | 'moves_other_ref' | 'git_runs_program'; what: string },
  special: Record<string, Rule> = {},
): Rule {
  return (input) => {
    // Options before the action word (e.g. `git submodule --quiet status`).
    let k = 0;
    while (k < input.args.length && input.args[k].value?.startsWith('-')) k++;
    const word = input.args[k];
    if (!word) {
      if (input.trailingDynamic) return input.deny('dynamic_argument', `the \`git ${input.sub}\` action comes from input at run time`);
      return defaultRead ? undefined : input.deny(deny.reason, `\`git ${input.sub}\` ${deny.what}`);
    }
    const v = exactValue(word);
    if (v === undefined) return input.deny('dynamic_argument', `the \`git ${input.sub}\` action \`${word.text}\` is computed at run time`);
    if (special[v]) return special[v]({ ...input, args: input.args.slice(k + 1) });
    if (reads.includes(v)) return undefined;
    return input.deny(deny.reason, `\`git ${input.sub} ${v}\` ${deny.what}`);
  };
}

const worktree = actionRule(['list'], false, { reason: 'shared_state', what: 'changes the shared worktree administration (other worktrees live there)' });
const remote = actionRule(['show', 'get-url'], true, { reason: 'shared_state', what: 'changes remotes in the shared config' });
const SUBMODULE_UPDATE: OptSpec[] = [
  {
    key: 'flag',
    short: 'qNf',
    long: [
      'quiet',
      'progress',
      'init',
      'remote',
      'fetch',
      'force',
      'checkout',
      'merge',
      'rebase',
      'recursive',
      'recommend-shallow',
      'single-branch',
      'dissociate',
      'require-init',
    ],
  },
  { key: 'value', short: 'j', long: ['depth', 'jobs', 'filter'], arg: 'required' },
  { key: 'reference', long: ['reference'], arg: 'required' },
];

/**
 * `git submodule update [--init]`: allowed inside the worktree. Observed on git 2.39.5, the submodule's repository
 * is cloned into this worktree's own admin directory (`<common>/worktrees/<id>/modules/<name>`), which the kernel
 * layer leaves writable, and its files land inside the worktree; `--merge`/`--rebase` act in that private clone.
 * The one shared write is `--init` registering a submodule not yet in the config (`submodule.<name>.url` and
 * `.active`, copied from .gitmodules; git never copies an `update = !command` from there, and refuses the `file`
 * and `ext` transports for submodules by default). When the main checkout has registered the submodule (the
 * usual case) nothing shared is written; otherwise the kernel layer, which keeps the config read-only, refuses
 * that write and the child asks the orchestrator.
 */
const submoduleUpdate: Rule = (input) => {
  const p = strict(input, SUBMODULE_UPDATE);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  for (const w of [...p.positionals, ...p.afterDashDash]) {
    const v = exactValue(w);
    if (v === undefined) return input.deny('dynamic_argument', `the submodule path \`${w.text}\` is computed at run time`);
    if (!cwdInside(resolvePath(input.cwd, v, input.scope.worktree), input.scope.worktree)) {
      return input.deny('outside_worktree', `the submodule path \`${v}\` is outside ${input.scope.worktree}`);
    }
  }
  return undefined;
};

const submodule = actionRule(
  ['status', 'summary'],
  true,
  { reason: 'shared_state', what: 'changes submodule state in the shared config and modules directory' },
  {
    foreach: (input) => input.deny('git_runs_program', '`git submodule foreach` runs a command in every submodule'),
    update: submoduleUpdate,
  },
);
const reflogActions = actionRule(
  ['exists', 'list'],
  true,
  { reason: 'shared_state', what: "expires or deletes reflog entries (all worktrees' reflogs)" },
  {
    show: (input) => logFamily(input),
  },
);
/** `git reflog [show] [log-options] [ref]`: without an action word it shows. */
const reflog: Rule = (input) => {
  const first = input.args[0];
  const v = first ? exactValue(first) : undefined;
  if (first && v === undefined) return input.deny('dynamic_argument', `the \`git reflog\` action \`${first.text}\` is computed at run time`);
  if (v !== undefined && ['show', 'exists', 'list', 'expire', 'delete', 'drop'].includes(v)) return reflogActions(input);
  return logFamily(input);
};
/**
 * `git notes [--ref <ref>] <action>`: every writing action changes a ref under refs/notes (refs/notes/commits by
 * default), which all worktrees share; none is this session's branch, so only the reading actions pass.
 */
const notes: Rule = (input) => {
  const args = input.args;
  let k = 0;
  for (; k < args.length; k++) {
    const v = args[k].value;
    if (v === undefined) return input.deny('dynamic_argument', `\`${args[k].text}\` in \`git notes\` is computed at run time`);
    if (!v.startsWith('-')) break;
    const parsed = parseOptions([args[k]], [{ key: 'ref', long: ['ref'], arg: 'required' }]);
    if (parsed.ok) continue;
    if (parsed.problem === 'missing_value') {
      k++; // `--ref <ref>`: any notes ref may be read
      continue;
    }
    return input.deny('unknown_git_option', `\`${v}\` is not an option of \`git notes\` the guard knows`);
  }
  const action = args[k] ? (args[k].value as string) : 'list';
  if (['list', 'show', 'get-ref'].includes(action)) return input.trailingDynamic && !args[k] ? noTrailing(input) : undefined;
  return input.deny('moves_other_ref', `\`git notes ${action}\` writes a ref under refs/notes, which every worktree shares`);
};
const sparse = actionRule(['list'], false, {
  reason: 'shared_state',
  what: 'changes sparse-checkout settings (and may enable per-worktree config in the shared config)',
});
const commitGraph = actionRule(['verify'], false, { reason: 'shared_state', what: 'rewrites shared object-store files' });
const multiPack = actionRule(['verify'], false, { reason: 'shared_state', what: 'rewrites shared object-store files' });
const rerere = actionRule(['status', 'diff', 'remaining'], false, { reason: 'shared_state', what: 'writes the shared rerere cache' });
const refsCmd = actionRule(['verify', 'list', 'exists'], false, { reason: 'shared_state', what: 'rewrites the shared ref store' });
const BUNDLE_CREATE: OptSpec[] = [
  { key: 'flag', short: 'q', long: ['quiet', 'progress', 'all-progress', 'all-progress-implied'] },
  { key: 'version', long: ['version'], arg: 'required' },
];

/** `git bundle create [options] <file> <rev-list args>`: the first operand after bundle's own options is written. */
const bundleCreate: Rule = (input) => {
  const args = input.args;
  for (let k = 0; k < args.length; k++) {
    const w = args[k];
    const v = w.value;
    if (v === undefined) {
      if (w.prefix.startsWith('-') || w.prefix === '' || w.splits)
        return input.deny('dynamic_argument', `\`${w.text}\` in \`git bundle create\` is computed at run time and may be an option or the file`);
      return writeTarget(input, w, `writes the bundle \`${w.text}\``);
    }
    if (v === '-' || !v.startsWith('-')) return v === '-' ? undefined : writeTarget(input, w, `writes the bundle \`${w.text}\``);
    const parsed = parseOptions([w], BUNDLE_CREATE);
    if (parsed.ok) continue;
    if (parsed.problem === 'missing_value') {
      k++; // `--version 3`
      continue;
    }
    return input.deny('unknown_git_option', `\`${v}\` is not an option of \`git bundle create\` the guard knows (it would decide which word is the file)`);
  }
  return input.trailingDynamic ? input.deny('dynamic_argument', '`git bundle create` gets its file from input at run time') : undefined;
};
const bundle = actionRule(['verify', 'list-heads', 'unbundle'], false, { reason: 'shared_state', what: 'is not modelled' }, { create: bundleCreate });

const CONFIG: OptSpec[] = [
  { key: 'write', long: ['add', 'replace-all', 'unset', 'unset-all', 'rename-section', 'remove-section', 'edit', 'comment'], short: 'e', danger: true },
  { key: 'read', long: ['get', 'get-all', 'get-regexp', 'get-urlmatch', 'list', 'get-color', 'get-colorbool'], short: 'l' },
  { key: 'scope', long: ['global', 'system', 'local', 'worktree', 'includes'] },
  { key: 'file', short: 'f', long: ['file'], arg: 'required' },
  { key: 'blob', long: ['blob'], arg: 'required' },
  { key: 'type', long: ['type', 'default', 'value', 'url'], arg: 'required' },
  {
    key: 'flag',
    long: [
      'bool',
      'int',
      'bool-or-int',
      'bool-or-str',
      'path',
      'expiry-date',
      'null',
      'name-only',
      'show-origin',
      'show-scope',
      'fixed-value',
      'all',
      'regexp',
      'no-type',
    ],
    short: 'z',
  },
];

/**
 * `git config` reads freely. It writes the shared config (or the per-worktree or global one, which the guard does
 * not tell apart) unless `-f` names a file inside the worktree, such as `.gitmodules`: no config git reads lives
 * there. The refusal names keys that run programs (`git config core.hooksPath x`).
 */
const config: Rule = (input) => {
  const p = strict(input, CONFIG);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  const words = [...p.positionals, ...p.afterDashDash];
  const action = words[0] ? exactValue(words[0]) : undefined;
  if (words[0] && action === undefined) return input.deny('dynamic_argument', `the \`git config\` key or action \`${words[0].text}\` is computed at run time`);
  const subcommand = action !== undefined && ['set', 'unset', 'rename-section', 'remove-section', 'edit', 'get', 'list'].includes(action);
  const writes = has(p, 'write') || (!has(p, 'read') && (subcommand ? !['get', 'list'].includes(action as string) : words.length > 1));
  if (!writes) return undefined;
  const files = optValues(p, 'file');
  if (files.length > 0 && !has(p, 'scope') && !has(p, 'blob')) {
    for (const f of files) {
      const outside = writeTarget(input, f, `writes the config file \`${f.text}\``);
      if (outside) return outside;
    }
    return undefined;
  }
  const keyWord = subcommand ? words[1] : words[0];
  const key = keyWord ? exactValue(keyWord) : undefined;
  if (key !== undefined && CONFIG_EXEC.some((re) => re.test(normalizeConfigKey(key)))) {
    return input.deny(
      'shared_state',
      `\`git config\` writes \`${key}\`, a key that makes git run a program (or load more config), in configuration every worktree shares`,
    );
  }
  return input.deny('shared_state', '`git config` with a value (or --add/--unset/set …) writes configuration that every worktree (and session) shares');
};

const TAG: OptSpec[] = [
  { key: 'list', short: 'l', long: ['list'] },
  { key: 'delete', short: 'd', long: ['delete'], danger: true },
  { key: 'verify', short: 'v', long: ['verify'] },
  { key: 'lines', short: 'n', arg: 'optional' },
  { key: 'filter', long: ['contains', 'no-contains', 'merged', 'no-merged'], arg: 'lastarg' },
  { key: 'points-at', long: ['points-at'], arg: 'required' },
  { key: 'display', long: ['sort', 'format'], arg: 'required' },
  { key: 'display-opt', long: ['column', 'color'], arg: 'optional' },
  { key: 'ignore-case', short: 'i', long: ['ignore-case', 'omit-empty'] },
  { key: 'create', short: 'asfe', long: ['annotate', 'sign', 'force', 'edit', 'create-reflog', 'no-sign'] },
  { key: 'create-value', short: 'umF', long: ['local-user', 'message', 'file', 'cleanup', 'trailer'], arg: 'required' },
];

const tag: Rule = (input) => {
  const p = strict(input, TAG);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  if (has(p, 'delete')) return input.deny('moves_other_ref', '`git tag -d` deletes a tag (a shared ref)');
  const names = [...p.positionals, ...p.afterDashDash];
  const listing = has(p, 'list') || has(p, 'verify') || has(p, 'filter') || has(p, 'points-at') || has(p, 'lines');
  if (listing && !has(p, 'create') && !has(p, 'create-value')) return undefined;
  if (names.length === 0 && !has(p, 'create') && !has(p, 'create-value')) return undefined;
  return input.deny('moves_other_ref', '`git tag <name>` creates or moves a tag (a shared ref)');
};

const SYMBOLIC_REF: OptSpec[] = [
  { key: 'quiet', short: 'q', long: ['quiet'] },
  { key: 'short', long: ['short'] },
  { key: 'recurse', long: ['recurse'] },
  { key: 'delete', short: 'd', long: ['delete'], danger: true },
  { key: 'message', short: 'm', arg: 'required' },
];

const symbolicRef: Rule = (input) => {
  const p = strict(input, SYMBOLIC_REF);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  const names = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'ref');
  if (isRefusal(names)) return names;
  if (!has(p, 'delete') && names.length <= 1) return undefined;
  return input.deny('moves_other_ref', "`git symbolic-ref` with a target (or -d) rewrites a symbolic ref such as HEAD (including other worktrees' HEADs)");
};

/** `git bisect log` and `terms` read this worktree's bisect state; every other action checks out other commits. */
const bisect: Rule = (input) => {
  const first = input.args[0];
  const v = first ? exactValue(first) : undefined;
  if (first && v === undefined) return input.deny('dynamic_argument', `the \`git bisect\` action \`${first.text}\` is computed at run time`);
  if ((v === 'log' || v === 'terms') && !input.trailingDynamic) return undefined;
  if (v === 'run') return input.deny('git_runs_program', '`git bisect run` runs a command at every step (and checks out other commits)');
  return input.deny('switches_branch', '`git bisect` checks out other commits in this worktree');
};

const refMover =
  (what: string): Rule =>
  (input) =>
    input.deny('moves_other_ref', `\`git ${input.sub}\` ${what}`);
const sharedWriter =
  (what: string): Rule =>
  (input) =>
    input.deny('shared_state', `\`git ${input.sub}\` ${what}`);
const runsProgram =
  (what: string): Rule =>
  (input) =>
    input.deny('git_runs_program', `\`git ${input.sub}\` ${what}`);
/** `--tool-help` alone only lists the tools git knows. */
const toolHelp =
  (rule: Rule): Rule =>
  (input) =>
    input.args.length === 1 && input.args[0].value === '--tool-help' && !input.trailingDynamic ? undefined : rule(input);

const REPLACE: OptSpec[] = [
  { key: 'list', short: 'l', long: ['list'] },
  { key: 'format', long: ['format'], arg: 'required' },
  { key: 'write', short: 'dfeg', long: ['delete', 'force', 'edit', 'graft', 'convert-graft-file', 'raw'], danger: true },
];

/** `git replace [-l] [--format=…] [<pattern>]` lists; anything else writes refs/replace/*, which every worktree shares. */
const replace: Rule = (input) => {
  const p = strict(input, REPLACE);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  const operands = [...p.positionals, ...p.afterDashDash];
  if (!has(p, 'write') && (has(p, 'list') || operands.length === 0)) return undefined;
  return input.deny('moves_other_ref', '`git replace` writes refs/replace (shared refs)');
};

const INIT: OptSpec[] = [
  { key: 'template', long: ['template'], arg: 'required', danger: true },
  { key: 'separate-git-dir', long: ['separate-git-dir'], arg: 'required', danger: true },
  { key: 'value', short: 'b', long: ['initial-branch', 'object-format', 'ref-format'], arg: 'required' },
  { key: 'shared', long: ['shared'], arg: 'optional' },
  { key: 'flag', short: 'q', long: ['quiet', 'bare'] },
];

/** A template directory supplies hooks (and config) that git copies into the new repository and later runs. */
const templateProblem = (input: RuleInput, p: Parsed): Verdict =>
  has(p, 'template')
    ? input.deny('git_config_exec', `\`git ${input.sub} --template\` copies hooks and config from a directory into the new repository, which git then runs`)
    : undefined;

const init: Rule = (input) => {
  const p = strict(input, INIT);
  if (isRefusal(p)) return p;
  const bad = templateProblem(input, p) ?? noTrailing(input);
  if (bad) return bad;
  for (const dir of optValues(p, 'separate-git-dir')) {
    const outside = writeTarget(input, dir, `puts the repository in \`${dir.text}\``);
    if (outside) return outside;
  }
  const operands = [...p.positionals, ...p.afterDashDash];
  if (operands.length > 1) return input.deny('unknown_git_option', '`git init` takes one directory');
  const dir = operands[0];
  if (dir && dir.value === undefined) return input.deny('dynamic_argument', `the directory \`${dir.text}\` for \`git init\` is computed at run time`);
  const where = dir ? resolvePath(input.cwd, dir.value as string, input.scope.worktree) : input.cwd;
  if (where.kind === 'known' && isInside(where.path, input.scope.worktree) && where.path !== input.scope.worktree) {
    return dir ? writeTarget(input, dir, `creates \`${dir.text}\``) : undefined;
  }
  return input.deny('shared_state', "`git init` here would re-initialise this worktree's shared repository (or a directory outside the worktree)");
};

const CLONE: OptSpec[] = [
  { key: 'upload-pack', short: 'u', long: ['upload-pack'], arg: 'required', danger: true },
  { key: 'template', long: ['template'], arg: 'required', danger: true },
  { key: 'config', short: 'c', long: ['config'], arg: 'required', danger: true },
  { key: 'separate-git-dir', long: ['separate-git-dir'], arg: 'required', danger: true },
  { key: 'local', short: 'l', long: ['local'] },
  { key: 'hardlinks', long: ['hardlinks'] },
  { key: 'shared', short: 's', long: ['shared'] },
  {
    key: 'value',
    short: 'obj',
    long: [
      'reference',
      'reference-if-able',
      'server-option',
      'origin',
      'branch',
      'revision',
      'depth',
      'shallow-since',
      'shallow-exclude',
      'jobs',
      'filter',
      'bundle-uri',
      'ref-format',
    ],
    arg: 'required',
  },
  { key: 'recurse', long: ['recurse-submodules', 'recursive'], arg: 'optional' },
  {
    key: 'flag',
    short: 'qvn46',
    long: [
      'quiet',
      'verbose',
      'progress',
      'checkout',
      'bare',
      'mirror',
      'single-branch',
      'tags',
      'shallow-submodules',
      'remote-submodules',
      'dissociate',
      'sparse',
      'also-filter-submodules',
      'reject-shallow',
      'ipv4',
      'ipv6',
    ],
  },
];

/** A repository argument git clones with the local optimisation: a path, not a URL (`file://` uses the transport). */
function localSource(v: string): boolean {
  if (v.includes('://')) return false;
  const colon = v.indexOf(':');
  return colon < 0 || v.slice(0, colon).includes('/');
}

/**
 * `git clone`: the destination must be inside the worktree; `-c` keys are judged like `git -c` (clone writes them
 * into the new repository's config and uses them for the checkout, so `core.fsmonitor` or `core.worktree` act at
 * once). A local source is cloned by hard-linking its object files: a link to the shared object store, whose
 * content a later write through the link would change. `--no-hardlinks` (or `--shared`, `--no-local`) avoids it.
 */
const clone: Rule = (input) => {
  const p = strict(input, CLONE);
  if (isRefusal(p)) return p;
  if (has(p, 'upload-pack')) return input.deny('git_runs_program', '`--upload-pack` runs a program for the clone');
  const bad = templateProblem(input, p) ?? noTrailing(input);
  if (bad) return bad;
  for (const kv of optValues(p, 'config')) {
    const problem = configOverride(kv, '--config');
    if (problem) return input.deny(problem.reason, problem.why);
  }
  for (const dir of optValues(p, 'separate-git-dir')) {
    const outside = writeTarget(input, dir, `puts the repository in \`${dir.text}\``);
    if (outside) return outside;
  }
  const operands = [...p.positionals, ...p.afterDashDash];
  const source = operands[0] ? exactValue(operands[0]) : undefined;
  if (operands[0] && source === undefined)
    return input.deny('dynamic_argument', `the repository \`${operands[0].text}\` for \`git clone\` is computed at run time`);
  if (source !== undefined && localSource(source) && !has(p, 'hardlinks', true) && !has(p, 'shared') && !has(p, 'local', true)) {
    return input.deny(
      'outside_worktree',
      `\`git clone ${source}\` hard-links the object files of a local repository (possibly the shared one) into the worktree`,
      `Add \`--no-hardlinks\`: \`git clone --no-hardlinks ${source} …\` copies the objects instead.`,
    );
  }
  const dest = operands[1];
  if (dest) return writeTarget(input, dest, `clones into \`${dest.text}\``);
  if (!cwdInside(input.cwd, input.scope.worktree)) return input.deny('outside_worktree', 'clone destination outside the worktree');
  return undefined;
};

/**
 * `apply` and `am`: `--directory=<root>` puts every patched path under root (taken from the top of the worktree),
 * `--build-fake-ancestor=<file>` writes an index file, `--unsafe-paths` lifts git's own check that patched paths
 * stay in the worktree. `--include`/`--exclude` only filter which paths apply, so they are not targets.
 */
const applyEffects = watched({
  writes: ['directory', 'build-fake-ancestor'],
  fromTop: ['directory'],
  valueTakers: ['-p', '-C', 'whitespace', 'include', 'exclude'],
});
const applyRule: Rule = (input) => {
  for (const w of input.args) {
    const v = w.value ?? w.prefix;
    if (v === '--') break;
    if (v.startsWith('--u') && 'unsafe-paths'.startsWith(v.slice(2).split('=')[0])) {
      return input.deny('outside_worktree', '`git apply --unsafe-paths` writes files outside the worktree');
    }
  }
  return applyEffects(input);
};
const am = watched({
  writes: ['directory'],
  fromTop: ['directory'],
  valueTakers: ['-p', '-C', 'whitespace', 'include', 'exclude', 'patch-format', 'resolvemsg', 'empty', 'quoted-cr'],
});

const checkoutIndex = watched({ writes: ['prefix'] });
// `--prefix` reads a tree into the index under a directory, which `-u` then writes from the top of the worktree.
// (`git archive --prefix` only names paths inside the archive: whatever extracts it is the writer.)
const readTree = watched({ writes: ['index-output', 'prefix'], fromTop: ['prefix'] });
const grep = watched({ exec: ['open-files-in-pager'], execShort: 'O' });
const archive = watched({ writes: ['output'], writeShort: 'o', exec: ['exec'] });
const formatPatch = watched({ writes: ['output-directory', 'output'], writeShort: 'o' });
const lsRemoteWatched = watched({ exec: ['upload-pack'] });
/** Any word of these may name a repository: refuse remote-helper transports. */
const noRemoteHelper =
  (rule: Rule): Rule =>
  (input) => {
    for (const w of input.args) {
      const v = w.value ?? '';
      const helper = remoteHelperProblem(v.startsWith('--remote=') ? v.slice('--remote='.length) : v);
      if (helper) return input.deny('git_runs_program', helper);
    }
    return rule(input);
  };
const lsRemote = noRemoteHelper(lsRemoteWatched);
const fastExport = watched({ writes: ['export-marks'] });
const fsck = watched({});
const fsckRule: Rule = (input) => {
  if (input.args.some((w) => (w.value ?? '').startsWith('--lost') || (w.value ?? '') === '--lost-found')) {
    return input.deny('shared_state', '`git fsck --lost-found` writes into the shared git directory');
  }
  return fsck(input);
};
const mailsplit = watched({ writeShort: 'o' });

const mergeFile: Rule = (input) => {
  if (input.args.some((w) => w.value === '-p' || w.value === '--stdout')) return undefined;
  const first = input.args.find((w) => w.value === undefined || !w.value.startsWith('-'));
  if (!first) return undefined;
  return writeTarget(input, first, `writes \`${first.text}\``);
};

const INTERPRET_TRAILERS: OptSpec[] = [
  { key: 'in-place', long: ['in-place'], danger: true },
  { key: 'value', long: ['where', 'if-exists', 'if-missing', 'trailer'], arg: 'required' },
  { key: 'flag', long: ['trim-empty', 'unfold', 'only-trailers', 'only-input', 'parse', 'no-divider'] },
];

/** `--in-place` (or any abbreviation of it) makes every file operand a write target. */
const interpretTrailers: Rule = (input) => {
  const p = strict(input, INTERPRET_TRAILERS);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input); // input words could add --in-place
  if (bad) return bad;
  if (!has(p, 'in-place')) return undefined;
  for (const w of [...p.positionals, ...p.afterDashDash]) {
    const outside = writeTarget(input, w, `edits \`${w.text}\` in place`);
    if (outside) return outside;
  }
  return undefined;
};

/** Commands whose operands are files they write (`git mailinfo <msg> <patch>`); their options take no separate value. */
const writesOperands: Rule = (input) => {
  const bad = noTrailing(input);
  if (bad) return bad;
  let options = true;
  for (const w of input.args) {
    if (options && w.value === '--') {
      options = false;
      continue;
    }
    if (options && (w.value ?? w.prefix).startsWith('-') && w.value !== undefined) continue;
    const outside = writeTarget(input, w, `writes \`${w.text}\``);
    if (outside) return outside;
  }
  return undefined;
};

const BUILTIN_STRATEGIES = ['ort', 'recursive', 'resolve', 'octopus', 'ours', 'subtree'];

/** `--strategy=<name>` that is not built in runs the program `git-merge-<name>` from the exec path or PATH. */
const picks: Rule = (input) => {
  const args = input.args;
  for (let k = 0; k < args.length; k++) {
    const w = args[k];
    const v = w.value ?? w.prefix;
    if (w.value === '--') break;
    if (w.value === undefined && !(v.startsWith('--') && v.includes('=')) && (v === '' || v.startsWith('-') || w.splits)) {
      // A computed word could be `--strategy=<name>` as a whole: only a program already on PATH could run.
      const why = `\`${w.text}\` in \`git ${input.sub}\` is computed at run time and could be --strategy=<program>`;
      if (!input.unsure) return input.deny('dynamic_argument', why);
      input.unsure(`${why}; the sandbox decides`);
      continue;
    }
    if (!v.startsWith('--') || v.length < 3) continue;
    const eq = v.indexOf('=');
    if (!'strategy'.startsWith(eq < 0 ? v.slice(2) : v.slice(2, eq))) continue;
    const value = eq >= 0 ? (w.value === undefined ? undefined : v.slice(eq + 1)) : args[++k] && exactValue(args[k]);
    if (value === undefined)
      return input.deny('dynamic_argument', `the merge strategy for \`git ${input.sub}\` (\`${w.text}\`) is computed at run time or missing`);
    if (!BUILTIN_STRATEGIES.includes(value)) return input.deny('git_runs_program', `\`--strategy=${value}\` runs the program \`git-merge-${value}\``);
  }
  if (input.trailingDynamic) {
    const why = `\`git ${input.sub}\` gets more arguments from input at run time, which could include --strategy=<program>`;
    if (!input.unsure) return input.deny('dynamic_argument', why);
    input.unsure(`${why}; the sandbox decides`);
  }
  return undefined;
};

const SUBCOMMANDS: Record<string, Rule> = {
  // read-only
  status: free,
  'rev-parse': free,
  'rev-list': logFamily,
  'ls-files': free,
  'ls-tree': free,
  'cat-file': free,
  blame: free,
  annotate: free,
  'show-ref': free,
  'for-each-ref': free,
  'name-rev': free,
  'merge-base': free,
  describe: free,
  cherry: free,
  'count-objects': free,
  var: free,
  version: free,
  help: free,
  'check-ignore': free,
  'check-attr': free,
  'check-ref-format': free,
  'check-mailmap': free,
  'verify-commit': free,
  'verify-tag': free,
  'verify-pack': free,
  'get-tar-commit-id': free,
  column: free,
  stripspace: free,
  'hash-object': free,
  mktree: free,
  mktag: free,
  'commit-tree': free,
  'patch-id': free,
  'merge-tree': free,
  'show-branch': free,
  'request-pull': free,
  'fmt-merge-msg': free,
  'show-index': free,
  'unpack-file': free,
  'diff-pairs': free,
  diff: logFamily,
  log: logFamily,
  show: logFamily,
  whatchanged: logFamily,
  shortlog: logFamily,
  'range-diff': logFamily,
  'diff-tree': logFamily,
  'diff-files': logFamily,
  'diff-index': logFamily,
  grep,
  archive: noRemoteHelper(archive),
  'format-patch': formatPatch,
  'ls-remote': lsRemote,
  'fast-export': fastExport,
  fsck: fsckRule,
  mailsplit,
  mailinfo: writesOperands,
  'merge-file': mergeFile,
  'interpret-trailers': interpretTrailers,
  bundle,
  // writes to this worktree's files, index and branch
  add: free,
  stage: free,
  rm: free,
  mv: free,
  restore: free,
  commit: free,
  clean: free,
  'cherry-pick': picks,
  revert: picks,
  am,
  apply: applyRule,
  'update-index': free,
  'write-tree': free,
  'read-tree': readTree,
  'checkout-index': checkoutIndex,
  // need a closer look
  checkout,
  switch: switchRule,
  branch,
  push,
  fetch,
  config,
  tag,
  stash,
  worktree,
  remote,
  submodule,
  reflog,
  notes,
  'symbolic-ref': symbolicRef,
  replace,
  init,
  clone: noRemoteHelper(clone),
  'sparse-checkout': sparse,
  'commit-graph': commitGraph,
  'multi-pack-index': multiPack,
  rerere,
  refs: refsCmd,
  // integration is the orchestrator's job
  merge: integration,
  rebase,
  pull: integration,
  reset,
  'merge-recursive': integration,
  'merge-ours': integration,
  'merge-octopus': integration,
  'merge-resolve': integration,
  'merge-subtree': integration,
  'merge-recursive-ours': integration,
  'merge-recursive-theirs': integration,
  // refs other than B
  'update-ref': refMover("writes any ref directly (including other branches and other worktrees' HEADs)"),
  'filter-branch': refMover('rewrites branches'),
  'filter-repo': refMover('rewrites branches'),
  'fast-import': refMover('writes refs from its input'),
  'send-pack': refMover('pushes refs'),
  'receive-pack': refMover('accepts ref updates into a repository'),
  'http-push': refMover('pushes refs'),
  replay: refMover('replays commits onto refs'),
  bisect,
  // shared object store and repository maintenance
  gc: sharedWriter('prunes and repacks the shared object store'),
  prune: sharedWriter('deletes objects from the shared object store'),
  repack: sharedWriter('rewrites the shared object store'),
  'prune-packed': sharedWriter('deletes objects from the shared object store'),
  'pack-refs': sharedWriter('rewrites the shared ref store'),
  maintenance: sharedWriter('runs maintenance on the shared repository'),
  // programs
  hook: runsProgram('runs hooks'),
  difftool: toolHelp(runsProgram('runs a configured diff tool')),
  mergetool: toolHelp(runsProgram('runs a configured merge tool')),
  'for-each-repo': runsProgram('runs git commands in other repositories'),
  'merge-index': runsProgram('runs a merge program'),
  'merge-one-file': runsProgram('runs as a merge program'),
  instaweb: runsProgram('starts a web server and browser'),
  'send-email': runsProgram('runs a mailer'),
  daemon: runsProgram('serves the repository'),
  credential: runsProgram('runs credential helpers'),
  'upload-pack': runsProgram('serves a fetch from a repository'),
  'upload-archive': runsProgram('serves an archive'),
  shell: runsProgram('is a login shell'),
};

/** Subcommands the guard knows, for tests and docs. */
export const KNOWN_GIT_SUBCOMMANDS: readonly string[] = Object.keys(SUBCOMMANDS);
