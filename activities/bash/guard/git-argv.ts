import { has, optValues, parseOptions, type OptSpec, type Parsed, type ParseResult } from './options';
import { checkWriteTarget, cwdInside, describeCwd, isInside, resolvePath, type Cwd } from './paths';
import { INTEGRATION_ROUTE, refusal, type Refusal } from './reasons';
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
    return deny(
      'unknown_git_subcommand',
      `\`git ${sub}\` is not a subcommand the guard knows; it may be an alias defined in config, so it is refused`,
    );
  }
  return rule({ args: argv.slice(i + 1), trailingDynamic: call.trailingDynamic, cwd, scope, sub, deny });
}

const GLOBAL_FLAGS = new Set([
  '-p', '--paginate', '-P', '--no-pager', '--no-replace-objects', '--no-lazy-fetch', '--literal-pathspecs', '--glob-pathspecs',
  '--noglob-pathspecs', '--icase-pathspecs', '--no-optional-locks', '--no-advice',
]);

function gitPath(p: Word, cwd: Cwd, scope: GitScope, option: string): Cwd | Refusal {
  const v = exactValue(p);
  if (v === undefined) return refusal('dynamic_argument', '', `the path for \`${option}\` (\`${p.text}\`) is computed at run time`);
  const where = resolvePath(cwd, v, scope.worktree);
  if (!cwdInside(where, scope.worktree)) {
    return refusal('outside_worktree', '', `\`${option} ${v}\` points at ${describeCwd(where)}, outside ${scope.worktree}`);
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

function configOverride(kv: Word, option: string): { reason: 'git_config_exec' | 'git_config_override' | 'dynamic_argument'; why: string } | undefined {
  const text = kv.value ?? kv.prefix;
  const eq = text.indexOf('=');
  if (kv.value === undefined && eq < 0) return { reason: 'dynamic_argument', why: `the \`${option}\` key \`${kv.text}\` is computed at run time` };
  const rawKey = eq < 0 ? text : text.slice(0, eq);
  // Section and variable names are case-insensitive; a subsection (between them) is not.
  const parts = rawKey.split('.');
  const key = parts.length <= 2 ? rawKey.toLowerCase() : [parts[0].toLowerCase(), ...parts.slice(1, -1), parts[parts.length - 1].toLowerCase()].join('.');
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

/**
 * Read-only commands whose options include a few that write files or run programs. Options are not fully
 * modelled: any word before `--` that could be one of those options is checked, and a computed word that could
 * be an option is refused.
 */
function watched(dangers: { writes?: readonly string[]; writeShort?: string; exec?: readonly string[]; execShort?: string; valueTakers?: readonly string[] }): Rule {
  const writes = dangers.writes ?? [];
  const exec = dangers.exec ?? [];
  const takers = new Set(dangers.valueTakers ?? []);
  return (input) => {
    const args = input.args;
    const missing = () => (input.trailingDynamic ? input.deny('dynamic_argument', `\`git ${input.sub}\` gets more arguments from input at run time; one could be a file to write`) : undefined);
    for (let i = 0; i < args.length; i++) {
      const w = args[i];
      const v = w.value;
      if (v === '--') return undefined;
      if (v === undefined) {
        const p = w.prefix;
        if (p.startsWith('--') && p.includes('=') && !w.splits) {
          const name = p.slice(2, p.indexOf('='));
          if (writes.some((o) => o.startsWith(name)) || exec.some((o) => o.startsWith(name))) {
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
        if (exec.some((o) => o.startsWith(name))) {
          return input.deny('git_runs_program', `\`${v}\` makes \`git ${input.sub}\` run a program`);
        }
        if (name.length > 0 && writes.some((o) => o.startsWith(name) && name.length >= 2)) {
          const value = eq >= 0 ? { ...w, value: v.slice(eq + 1), prefix: v.slice(eq + 1) } : args[++i];
          if (!value) return missing();
          const bad = writeTarget(input, value, `writes \`${value.text}\``);
          if (bad) return bad;
          continue;
        }
        if (takers.has(name) && eq < 0) i++;
        continue;
      }
      if (v.startsWith('-') && v.length > 1 && !v.startsWith('--')) {
        if (dangers.execShort && v[1] && dangers.execShort.includes(v[1])) {
          return input.deny('git_runs_program', `\`${v}\` makes \`git ${input.sub}\` run a program`);
        }
        if (dangers.writeShort && dangers.writeShort.includes(v[1])) {
          const value = v.length > 2 ? { ...w, value: v.slice(2), prefix: v.slice(2) } : args[++i];
          if (!value) return missing();
          const bad = writeTarget(input, value, `writes \`${value.text}\``);
          if (bad) return bad;
          continue;
        }
        if (takers.has(v) && v.length === 2) i++;
      }
    }
    if (input.trailingDynamic && (writes.length > 0 || exec.length > 0 || dangers.writeShort || dangers.execShort)) return missing();
    return undefined;
  };
}

const LOG_VALUES = ['-n', '-S', '-G', '-L', '--max-count', '--skip', '--since', '--after', '--until', '--before', '--author', '--committer', '--grep', '--min-parents', '--max-parents', '--since-as-filter'];
const logFamily = watched({ writes: ['output'], valueTakers: LOG_VALUES.map((o) => o.replace(/^--/, '')).concat(LOG_VALUES) });

// ---------------------------------------------------------------------------------------------------------------
// Rules for the subcommands that can move refs, switch the worktree or touch shared state.

const integration: Rule = (input) => {
  const { args, sub } = input;
  if (['merge', 'rebase'].includes(sub) && args.length === 1 && args[0].value === '--abort' && !input.trailingDynamic) return undefined;
  const abort = ['merge', 'rebase'].includes(sub) ? ` Only \`git ${sub} --abort\` is allowed.` : '';
  return input.deny('integration_policy', `\`git ${sub}\` integrates or rewrites history; in an isolated child that is the orchestrator's job.${abort}`);
};

const reset: Rule = (input) =>
  input.deny(
    'integration_policy',
    '`git reset` moves the branch or the index wholesale; in an isolated child it is refused (integration and rewinds are the orchestrator\'s job)',
  );

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
    return input.deny('switches_branch', `\`git checkout ${has(p, 'orphan') ? '--orphan' : '-b'}\` creates a new branch and moves this worktree off ${scope.branch}`);
  }
  if (has(p, 'detach')) return input.deny('switches_branch', `\`--detach\` moves this worktree off ${scope.branch}`);
  // With `--` (or a pathspec file) the words before it name at most a tree to take files from: no switch.
  if (p.dashDash || has(p, 'pathspec-from-file')) {
    const operands = literalOperands(input, p.positionals, 'tree');
    if (isRefusal(operands)) return operands;
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
  if (only === scope.branch || only === 'HEAD' || only === '@') return undefined;
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
  if (operands.length === 1 && operands[0] === scope.branch) return undefined;
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
    return input.deny('moves_other_ref', `\`git branch\` with ${writes.map((k) => `--${k}`).join(', ')} deletes, renames, copies or force-moves branches; only commits may move ${scope.branch}`);
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
export function remoteHelperProblem(v: string): string | undefined {
  return /^[A-Za-z][A-Za-z0-9+.-]*::/.test(v) ? `\`${v}\` makes git run the remote helper \`git-remote-${v.slice(0, v.indexOf('::'))}\` (ext:: runs any command)` : undefined;
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
    if (v !== 'check' && v !== 'no') return input.deny('moves_other_ref', `\`--recurse-submodules=${r.text}\` pushes other repositories' refs`);
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
export function pushRefspecProblem(spec: string, scope: GitScope): string | undefined {
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

const fetch: Rule = (input) => {
  const p = strict(input, FETCH);
  if (isRefusal(p)) return p;
  if (has(p, 'update-head-ok')) return input.deny('moves_other_ref', '`--update-head-ok` lets fetch move a checked-out branch');
  if (has(p, 'upload-pack')) return input.deny('git_runs_program', '`--upload-pack` runs a program for the fetch');
  if (has(p, 'prune-tags')) return input.deny('moves_other_ref', '`--prune-tags` deletes local tags (shared refs)');
  if (has(p, 'stdin')) return input.deny('dynamic_argument', '`git fetch --stdin` reads its refspecs at run time');
  for (const m of optValues(p, 'refmap')) {
    const v = exactValue(m);
    if (v === undefined) return input.deny('dynamic_argument', `the refmap \`${m.text}\` is computed at run time`);
    if (v !== '' && fetchRefspecProblem(v)) return input.deny('moves_other_ref', `\`--refmap=${v}\` maps fetched refs outside refs/remotes/`);
  }
  const bad = noTrailing(input);
  if (bad) return bad;
  const words = literalOperands(input, [...p.positionals, ...p.afterDashDash], 'repository or refspec');
  if (isRefusal(words)) return words;
  for (const w of words) {
    const helper = remoteHelperProblem(w);
    if (helper) return input.deny('git_runs_program', helper);
  }
  if (has(p, 'all') || has(p, 'multiple')) return undefined; // operands are remote names
  const refspecs = words.slice(1);
  for (let k = 0; k < refspecs.length; k++) {
    if (refspecs[k] === 'tag') return input.deny('moves_other_ref', '`git fetch <remote> tag <name>` writes a local tag (a shared ref)');
    const problem = fetchRefspecProblem(refspecs[k]);
    if (problem) return input.deny('moves_other_ref', `refspec \`${refspecs[k]}\`: ${problem}`);
  }
  return undefined;
};

/** A fetch refspec may write only remote-tracking refs (or nothing but FETCH_HEAD). */
export function fetchRefspecProblem(spec: string): string | undefined {
  let s = spec;
  if (s.startsWith('^')) return undefined; // negative: only excludes
  if (s.startsWith('+')) s = s.slice(1);
  const colon = s.indexOf(':');
  if (colon < 0) return undefined;
  const dst = s.slice(colon + 1);
  if (dst === '') return undefined;
  if (dst.startsWith('refs/remotes/')) return undefined;
  return `writes the local ref \`${dst}\`; fetch may write only remote-tracking refs (refs/remotes/…) or FETCH_HEAD`;
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
const submodule = actionRule(['status', 'summary'], true, { reason: 'shared_state', what: 'changes submodule state in the shared config and modules directory' }, {
  foreach: (input) => input.deny('git_runs_program', '`git submodule foreach` runs a command in every submodule'),
});
const reflogActions = actionRule(['exists', 'list'], true, { reason: 'shared_state', what: 'expires or deletes reflog entries (all worktrees\' reflogs)' }, {
  show: (input) => logFamily(input),
});
/** `git reflog [show] [log-options] [ref]`: without an action word it shows. */
const reflog: Rule = (input) => {
  const first = input.args[0];
  const v = first ? exactValue(first) : undefined;
  if (first && v === undefined) return input.deny('dynamic_argument', `the \`git reflog\` action \`${first.text}\` is computed at run time`);
  if (v !== undefined && ['show', 'exists', 'list', 'expire', 'delete', 'drop'].includes(v)) return reflogActions(input);
  return logFamily(input);
};
const notes = actionRule(['list', 'show', 'get-ref'], true, { reason: 'moves_other_ref', what: 'writes refs/notes (shared refs)' });
const sparse = actionRule(['list'], false, { reason: 'shared_state', what: 'changes sparse-checkout settings (and may enable per-worktree config in the shared config)' });
const commitGraph = actionRule(['verify'], false, { reason: 'shared_state', what: 'rewrites shared object-store files' });
const multiPack = actionRule(['verify'], false, { reason: 'shared_state', what: 'rewrites shared object-store files' });
const rerere = actionRule(['status', 'diff', 'remaining'], false, { reason: 'shared_state', what: 'writes the shared rerere cache' });
const refsCmd = actionRule(['verify', 'list', 'exists'], false, { reason: 'shared_state', what: 'rewrites the shared ref store' });
const bundle = actionRule(['verify', 'list-heads', 'unbundle'], false, { reason: 'shared_state', what: 'is not modelled' }, {
  create: (input) => {
    const file = input.args.find((w) => !w.value?.startsWith('-'));
    return file ? writeTarget(input, file, `writes the bundle \`${file.text}\``) : undefined;
  },
});

const CONFIG: OptSpec[] = [
  { key: 'write', long: ['add', 'replace-all', 'unset', 'unset-all', 'rename-section', 'remove-section', 'edit', 'comment'], short: 'e', danger: true },
  { key: 'read', long: ['get', 'get-all', 'get-regexp', 'get-urlmatch', 'list', 'get-color', 'get-colorbool'], short: 'l' },
  { key: 'scope', long: ['global', 'system', 'local', 'worktree', 'includes'] },
  { key: 'file', short: 'f', long: ['file', 'blob'], arg: 'required' },
  { key: 'type', long: ['type', 'default', 'value', 'url'], arg: 'required' },
  { key: 'flag', long: ['bool', 'int', 'bool-or-int', 'bool-or-str', 'path', 'expiry-date', 'null', 'name-only', 'show-origin', 'show-scope', 'fixed-value', 'all', 'regexp', 'no-type'], short: 'z' },
];

const config: Rule = (input) => {
  const p = strict(input, CONFIG);
  if (isRefusal(p)) return p;
  const bad = noTrailing(input);
  if (bad) return bad;
  if (has(p, 'write')) return input.deny('shared_state', '`git config` writes configuration that every worktree (and session) shares');
  const words = [...p.positionals, ...p.afterDashDash];
  const action = words[0] ? exactValue(words[0]) : undefined;
  if (words[0] && action === undefined) return input.deny('dynamic_argument', `the \`git config\` key or action \`${words[0].text}\` is computed at run time`);
  if (action !== undefined && ['set', 'unset', 'rename-section', 'remove-section', 'edit'].includes(action) && !has(p, 'read')) {
    return input.deny('shared_state', `\`git config ${action}\` writes configuration that every worktree (and session) shares`);
  }
  if (has(p, 'read') || action === 'get' || action === 'list') return undefined;
  if (words.length <= 1) return undefined; // `git config <key>` reads
  return input.deny('shared_state', '`git config <key> <value>` writes configuration that every worktree (and session) shares');
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
  return input.deny('moves_other_ref', '`git symbolic-ref` with a target (or -d) rewrites a symbolic ref such as HEAD (including other worktrees\' HEADs)');
};

const refMover = (what: string): Rule => (input) => input.deny('moves_other_ref', `\`git ${input.sub}\` ${what}`);
const sharedWriter = (what: string): Rule => (input) => input.deny('shared_state', `\`git ${input.sub}\` ${what}`);
const runsProgram = (what: string): Rule => (input) => input.deny('git_runs_program', `\`git ${input.sub}\` ${what}`);

const replace: Rule = (input) => {
  const words = input.args.filter((w) => w.value !== '--');
  if (words.length === 0 || words.every((w) => ['-l', '--list'].includes(w.value ?? '') || (w.value ?? '').startsWith('--format'))) return undefined;
  return input.deny('moves_other_ref', '`git replace` writes refs/replace (shared refs)');
};

const init: Rule = (input) => {
  const args = input.args;
  let dir: Word | undefined;
  for (let k = 0; k < args.length; k++) {
    const v = args[k].value;
    if (v === undefined) return input.deny('dynamic_argument', `\`${args[k].text}\` in \`git init\` is computed at run time`);
    if (v.startsWith('--separate-git-dir') || v.startsWith('--template')) {
      const value = v.includes('=') ? { ...args[k], value: v.slice(v.indexOf('=') + 1) } : args[++k];
      if (!value) return undefined;
      const bad = writeTarget(input, value, `writes \`${value.text}\``);
      if (bad) return bad;
      continue;
    }
    if (v === '-b' || v === '--initial-branch' || v === '--object-format' || v === '--ref-format' || v === '--shared') {
      if (v !== '--shared') k++;
      continue;
    }
    if (!v.startsWith('-')) dir = args[k];
  }
  const where = dir ? resolvePath(input.cwd, dir.value as string, input.scope.worktree) : input.cwd;
  if (where.kind === 'known' && isInside(where.path, input.scope.worktree) && where.path !== input.scope.worktree) {
    if (dir) {
      const bad = writeTarget(input, dir, `creates \`${dir.text}\``);
      if (bad) return bad;
    }
    return undefined;
  }
  return input.deny('shared_state', '`git init` here would re-initialise this worktree\'s shared repository (or a directory outside the worktree)');
};

const clone: Rule = (input) => {
  const args = input.args;
  const operands: Word[] = [];
  for (let k = 0; k < args.length; k++) {
    const w = args[k];
    const v = w.value;
    if (v === undefined) {
      if (w.prefix && !w.prefix.startsWith('-') && !w.splits) {
        operands.push(w);
        continue;
      }
      return input.deny('dynamic_argument', `\`${w.text}\` in \`git clone\` is computed at run time`);
    }
    if (v === '--') {
      operands.push(...args.slice(k + 1));
      break;
    }
    if (/^--u(p(l(o(a(d(-(p(a(ck?)?)?)?)?)?)?)?)?)?(=|$)/.test(v) || v === '-u' || /^-[^-]*u/.test(v)) {
      return input.deny('git_runs_program', '`--upload-pack` runs a program for the clone');
    }
    if (v.startsWith('--separate-git-dir')) {
      const value = v.includes('=') ? { ...w, value: v.slice(v.indexOf('=') + 1) } : args[++k];
      if (value) {
        const bad = writeTarget(input, value, `writes \`${value.text}\``);
        if (bad) return bad;
      }
      continue;
    }
    if (['-o', '--origin', '-b', '--branch', '-c', '--config', '--depth', '--reference', '--reference-if-able', '--template', '-j', '--jobs', '--filter', '--server-option', '--shallow-since', '--shallow-exclude', '--bundle-uri', '--ref-format'].includes(v)) {
      k++;
      continue;
    }
    if (!v.startsWith('-')) operands.push(w);
  }
  if (input.trailingDynamic) return input.deny('dynamic_argument', '`git clone` gets its destination from input at run time');
  const dest = operands[1];
  if (dest) return writeTarget(input, dest, `clones into \`${dest.text}\``);
  if (!cwdInside(input.cwd, input.scope.worktree)) return input.deny('outside_worktree', 'clone destination outside the worktree');
  return undefined;
};

// No option of apply/fsck writes elsewhere or runs a program, but a computed word could still be one.
const apply = watched({});
const applyRule: Rule = (input) => {
  for (const w of input.args) {
    const v = w.value ?? w.prefix;
    if (v.startsWith('--u') && 'unsafe-paths'.startsWith(v.slice(2).split('=')[0])) {
      return input.deny('outside_worktree', '`git apply --unsafe-paths` writes files outside the worktree');
    }
  }
  return apply(input);
};

const checkoutIndex = watched({ writes: ['prefix'] });
const readTree = watched({ writes: ['index-output'] });
const grep = watched({ exec: ['open-files-in-pager'], execShort: 'O' });
const archive = watched({ writes: ['output'], writeShort: 'o', exec: ['exec'] });
const formatPatch = watched({ writes: ['output-directory', 'output'], writeShort: 'o' });
const lsRemoteWatched = watched({ exec: ['upload-pack'] });
/** Any word of these may name a repository: refuse remote-helper transports. */
const noRemoteHelper = (rule: Rule): Rule => (input) => {
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

const interpretTrailers: Rule = (input) => {
  if (!input.args.some((w) => (w.value ?? '').startsWith('--in-place'))) return undefined;
  for (const w of input.args) {
    if (w.value !== undefined && w.value.startsWith('-')) continue;
    const bad = writeTarget(input, w, `edits \`${w.text}\` in place`);
    if (bad) return bad;
  }
  return undefined;
};

const SUBCOMMANDS: Record<string, Rule> = {
  // read-only
  status: free, 'rev-parse': free, 'rev-list': logFamily, 'ls-files': free, 'ls-tree': free, 'cat-file': free, blame: free,
  annotate: free, 'show-ref': free, 'for-each-ref': free, 'name-rev': free, 'merge-base': free, describe: free, cherry: free,
  'count-objects': free, var: free, version: free, help: free, 'check-ignore': free, 'check-attr': free,
  'check-ref-format': free, 'check-mailmap': free, 'verify-commit': free, 'verify-tag': free, 'verify-pack': free,
  'get-tar-commit-id': free, column: free, stripspace: free, 'hash-object': free, mktree: free, mktag: free,
  'commit-tree': free, 'patch-id': free, 'merge-tree': free, 'show-branch': free, 'request-pull': free,
  'fmt-merge-msg': free, 'show-index': free, 'unpack-file': free, 'diff-pairs': free,
  diff: logFamily, log: logFamily, show: logFamily, whatchanged: logFamily, shortlog: logFamily, 'range-diff': logFamily,
  'diff-tree': logFamily, 'diff-files': logFamily, 'diff-index': logFamily,
  grep, archive: noRemoteHelper(archive), 'format-patch': formatPatch, 'ls-remote': lsRemote, 'fast-export': fastExport, fsck: fsckRule,
  mailsplit, mailinfo: free, 'merge-file': mergeFile, 'interpret-trailers': interpretTrailers, bundle,
  // writes to this worktree's files, index and branch
  add: free, stage: free, rm: free, mv: free, restore: free, commit: free, clean: free, 'cherry-pick': free, revert: free,
  am: free, apply: applyRule, 'update-index': free, 'write-tree': free, 'read-tree': readTree, 'checkout-index': checkoutIndex,
  // need a closer look
  checkout, switch: switchRule, branch, push, fetch, config, tag, stash, worktree, remote, submodule, reflog, notes,
  'symbolic-ref': symbolicRef, replace, init, clone: noRemoteHelper(clone), 'sparse-checkout': sparse, 'commit-graph': commitGraph,
  'multi-pack-index': multiPack, rerere, refs: refsCmd,
  // integration is the orchestrator's job
  merge: integration, rebase: integration, pull: integration, reset,
  'merge-recursive': integration, 'merge-ours': integration, 'merge-octopus': integration, 'merge-resolve': integration,
  'merge-subtree': integration, 'merge-recursive-ours': integration, 'merge-recursive-theirs': integration,
  // refs other than B
  'update-ref': refMover('writes any ref directly (including other branches and other worktrees\' HEADs)'),
  'filter-branch': refMover('rewrites branches'), 'filter-repo': refMover('rewrites branches'),
  'fast-import': refMover('writes refs from its input'), 'send-pack': refMover('pushes refs'),
  'receive-pack': refMover('accepts ref updates into a repository'), 'http-push': refMover('pushes refs'),
  replay: refMover('replays commits onto refs'), bisect: (input) => input.deny('switches_branch', '`git bisect` checks out other commits in this worktree'),
  // shared object store and repository maintenance
  gc: sharedWriter('prunes and repacks the shared object store'), prune: sharedWriter('deletes objects from the shared object store'),
  repack: sharedWriter('rewrites the shared object store'), 'prune-packed': sharedWriter('deletes objects from the shared object store'),
  'pack-refs': sharedWriter('rewrites the shared ref store'), maintenance: sharedWriter('runs maintenance on the shared repository'),
  // programs
  hook: runsProgram('runs hooks'), difftool: runsProgram('runs a configured diff tool'), mergetool: runsProgram('runs a configured merge tool'),
  'for-each-repo': runsProgram('runs git commands in other repositories'), 'merge-index': runsProgram('runs a merge program'),
  'merge-one-file': runsProgram('runs as a merge program'), instaweb: runsProgram('starts a web server and browser'),
  'send-email': runsProgram('runs a mailer'), daemon: runsProgram('serves the repository'), credential: runsProgram('runs credential helpers'),
  'upload-pack': runsProgram('serves a fetch from a repository'), 'upload-archive': runsProgram('serves an archive'), shell: runsProgram('is a login shell'),
};

/** Subcommands the guard knows, for tests and docs. */
export const KNOWN_GIT_SUBCOMMANDS: readonly string[] = Object.keys(SUBCOMMANDS);
