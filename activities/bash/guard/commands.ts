import { posix } from 'node:path';
import { checkAssignment, pathIsWritable, splitAssignmentWord } from './env';
import { decideGit } from './git-argv';
import { note, type GuardScope, type Invocation, type ScriptAnalyzer, type ShellState } from './invocation';
import {
  EDITORS,
  OTHER_SHELLS,
  POSIX_SHELLS,
  decideAwk,
  decideEditor,
  decideInterpreter,
  decideSed,
  interpreterGrammarFor,
  programName,
  planShell,
  zshBlindSpot,
  type Unsure,
} from './launchers';
import { checkWriteTarget, cwdInside, resolvePath, type Cwd, type WriteVerdict } from './paths';
import { refusal, type GuardReason, type HistoryClaim, type Refusal } from './reasons';
import { arithmeticNames, provenanceOf, worst, type Provenance } from './taint';
import { dynamicWord, exactValue, literalWord, type Word } from './words';
import { WRAPPERS, unwrap } from './wrappers';

/**
 * One program invocation, decided: wrappers are peeled, git goes to the git model, shells and interpreters to
 * the launchers, builtins that change the shell (cd, eval, trap, alias …) are handled here, and every other
 * program is checked for file writes outside the worktree and for arguments that look like a launched git.
 */

const MAX_HOPS = 16;

export function decideInvocation(inv: Invocation, scope: GuardScope, state: ShellState, analyzer: ScriptAnalyzer, hops = 0): Refusal | undefined {
  const deny = (reason: GuardReason, why: string, instead?: string) => refusal(reason, inv.text, why, instead);
  if (hops > MAX_HOPS) return deny('unresolved_launcher', 'too many nested wrappers to follow');
  const unsure: Unsure = (why, reason) => note(state, inv.text, why, reason);
  let writablePath = state.writablePath;
  // Git and other tools run an editor or pager through the shell (`sh -c "$GIT_EDITOR \"$@\""`): a literal one is
  // shell code the guard reads like `bash -c`, from the same directory.
  const readProgram = (source: string, origin: string) =>
    analyzer.script(source, nestedState(state, inv.cwd), { origin: `\`${origin}\``, stdin: { kind: 'inherited' } });
  for (const a of inv.assignments) {
    const bad = checkAssignment(a.name, a.value, 'prefix', inv.cwd, scope.worktree, inv.text, unsure, readProgram);
    if (bad) return bad;
    if (a.name === 'PATH') writablePath = pathIsWritable(a.value, inv.cwd, scope.worktree);
  }
  const [first, ...args] = inv.argv;
  if (!first) return undefined;
  const name = exactValue(first);
  if (name === undefined) {
    return deny('dynamic_command', `the command name \`${first.text}\` is computed at run time (${first.dynamic ?? 'glob'})`);
  }
  if (name === '') return undefined;
  const hasSlash = name.includes('/');
  // `/usr/bin/python3.11`, `node20`, `perl5.36`: the program, whatever its path and version suffix.
  const base = programName(hasSlash ? posix.basename(name) : name);
  if (hasSlash) {
    const where = resolvePath(inv.cwd, name, scope.worktree);
    if (where.kind !== 'known' || cwdInside(where, scope.worktree) || /^\/(tmp|var\/tmp|dev\/shm|proc|dev)\//.test(where.path)) {
      unsure(`\`${name}\` is a program in a directory commands can write (a copy of git or a shell, a script): the guard cannot know what it runs`);
    }
  } else if (writablePath && !BUILTIN_NAMES.has(name)) {
    unsure(`PATH names a directory commands can write (or a value read at run time) ahead of the system's: \`${name}\` may run a program written there`);
  }

  if (!hasSlash) {
    const builtin = decideBuiltin(inv, name, args, scope, state, analyzer);
    if (builtin !== 'not_builtin') return builtin;
  }

  if (Object.prototype.hasOwnProperty.call(WRAPPERS, base)) {
    const out = unwrap(inv, base, scope);
    if (!out || out.kind === 'nothing') return undefined;
    if (out.kind === 'refuse') return out.refusal;
    for (const inner of out.invocations) {
      const bad = decideInvocation(inner, scope, state, analyzer, hops + 1);
      if (bad) return bad;
    }
    if (out.shellString) {
      return analyzer.script(out.shellString.source, nestedState(state, out.shellString.cwd), { origin: `\`${base} -c\``, stdin: inv.stdin });
    }
    return undefined;
  }

  if (base === 'git' || base === 'hub') {
    // What git's model cannot know but the sandbox confines is noted (unsure), not refused; the program's own
    // environment assignments (`GIT_DIR=…`) are judged like the options they stand for.
    const claim = (c: Omit<HistoryClaim, 'construct'>) => void state.claims.push({ construct: inv.text, ...c });
    const strict = decideGit(
      { argv: args, trailingDynamic: inv.trailingDynamic, cwd: inv.cwd, text: inv.text, unsure, env: inv.assignments, claim, readCode: readProgram },
      scope,
    );
    // `xargs git show`: words read at run time follow a read-only subcommand. The fixed part is judged; what the
    // input adds (an `--output=…` among them) is left to the sandbox.
    const sub = args[0]?.value;
    if (strict?.reason === 'dynamic_argument' && inv.trailingDynamic && sub !== undefined && READ_ONLY_GIT.has(sub)) {
      const fixed = decideGit({ argv: args, trailingDynamic: false, cwd: inv.cwd, text: inv.text }, scope);
      if (!fixed) unsure(`\`git ${sub}\` gets more arguments read at run time (xargs, find -exec … +); an option among them could write a file`);
      return fixed;
    }
    return strict;
  }
  if (base.startsWith('git-')) {
    return decideGit(
      {
        argv: [literalWord(base.slice(4)), ...args],
        trailingDynamic: inv.trailingDynamic,
        cwd: inv.cwd,
        text: inv.text,
        unsure,
        env: inv.assignments,
        claim: (c) => void state.claims.push({ construct: inv.text, ...c }),
        readCode: readProgram,
      },
      scope,
    );
  }

  if (POSIX_SHELLS.has(base)) {
    const plan = planShell(inv, base);
    if (plan.kind === 'refuse') return plan.refusal;
    if (plan.kind === 'file') {
      if (!versionOnly(args)) unsure(`\`${base}\` runs a script file the guard does not read`);
      return undefined;
    }
    if (plan.zsh) {
      const spot = zshBlindSpot(plan.source);
      if (spot) return deny('parser_blind_spot', spot);
    }
    return analyzer.script(plan.source, nestedState(state, inv.cwd), { zsh: plan.zsh, origin: `\`${base} -c\``, stdin: inv.stdin });
  }
  if (OTHER_SHELLS.has(base)) {
    if (args.length === 0) return deny('shell_from_stdin', `\`${base}\` without arguments reads commands from stdin`);
    return deny('unresolved_launcher', `\`${base}\` is not a POSIX shell; the guard does not parse its code`);
  }

  const grammar = interpreterGrammarFor(base);
  if (grammar) return decideInterpreter(inv, base, grammar, unsure);
  if (['awk', 'gawk', 'mawk', 'nawk', 'busybox-awk'].includes(base)) return decideAwk(inv, base, scope.worktree, unsure);
  if (base === 'sed' || base === 'gsed') {
    const bad = decideSed(inv, scope.worktree, unsure);
    if (!bad && inv.trailingDynamic && args.some((a) => /^(-[a-zA-Z]*i|--in-place)/.test(a.value ?? ''))) {
      unsure(`\`${base} -i\` edits files named by input read at run time`);
    }
    return bad;
  }
  if (EDITORS.has(base)) return decideEditor(inv, base, unsure);
  if (base === 'gh' || base === 'glab') return decideForge(inv, base, args);
  if (base === 'script') return decideScript(inv, scope, state, analyzer);
  if (base === 'watch') return decideWatch(inv, scope, state, analyzer, hops);
  if (base === 'make' || base === 'gmake') {
    const dir = operandsOf(args, [], ['-C', '--directory']).targets;
    for (const d of dir) {
      const v = exactValue(d);
      const where = v === undefined ? undefined : resolvePath(inv.cwd, v, scope.worktree);
      if (!where || !cwdInside(where, scope.worktree))
        return deny('outside_worktree', `\`make -C ${d.text}\` runs recipes in a directory outside the worktree`);
    }
  }

  const execOption = EXEC_OPTIONS[base]?.find((o) => args.some((a) => (a.value ?? a.prefix).startsWith(o)));
  if (execOption) {
    return deny('unresolved_launcher', `\`${base} ${execOption}…\` runs a command given as an option, which the guard does not follow`);
  }
  const outputs = OUTPUT_OPTIONS[base];
  if (outputs) {
    const bad = checkTargets(inv, operandsOf(args, [], outputs).targets, scope, base, state);
    if (bad) return bad;
  }
  if (['cp', 'install', 'ln', 'link', 'rsync'].includes(base)) {
    const copied = args.find((a) => a.value !== undefined && !a.value.startsWith('-') && a.value.includes('/') && launchesWhenRenamed(a.value));
    if (copied && args.indexOf(copied) < args.length - 1) {
      return deny(
        'dynamic_command',
        `\`${base} ${copied.value}\` makes a copy of a program that runs others under a name the guard does not know`,
        'Run git and shells by their own names.',
      );
    }
  }
  const write = WRITERS[base];
  if (write) {
    const bad = write(inv, args, scope, state);
    if (bad) return bad;
    // `xargs rm`, `find … -exec touch {} +`: more targets come from input at run time.
    if (inv.trailingDynamic) unsure(`\`${base}\` writes files named by input read at run time`);
    return undefined;
  }
  if (DATA_ONLY.has(base)) return undefined;
  if (STRING_LAUNCHERS.has(base)) {
    for (const a of args) {
      const v = a.value ?? a.prefix;
      if (LAUNCHED_CODE.test(v) || launchesByName(v)) {
        return deny('unresolved_launcher', `\`${base}\` runs \`${a.text}\` as a command, which the guard does not follow`);
      }
    }
    if (!versionOnly(args)) unsure(`\`${base}\` runs code the guard does not read (package scripts, recipes, containers, other hosts …)`);
    return undefined;
  }
  for (const a of args) {
    const v = exactValue(a);
    if (v !== undefined && launchesByName(v)) {
      return deny('unresolved_launcher', `\`${base}\` is given \`${v}\` as an argument; it may run it, and the guard does not model \`${base}\``);
    }
  }
  // Never "safe because unrecognised": a program the guard has no model of is left to the sandbox.
  if (!versionOnly(args)) unsure(`the guard has no model of \`${base}\`: it cannot tell what it writes or runs`);
  return undefined;
}

/** A nested shell (`bash -c`, `flock -c`): it inherits the environment, not `set -e` or the loop it runs in. */
const nestedState = (state: ShellState, cwd: Cwd): ShellState => ({ ...state, cwd, stack: [...state.stack], loopDepth: 0, errexit: false });

/** git subcommands that only read: more words from input cannot move a ref (the sandbox confines file writes). */
const READ_ONLY_GIT = new Set([
  'show',
  'log',
  'diff',
  'blame',
  'annotate',
  'cat-file',
  'ls-files',
  'ls-tree',
  'grep',
  'rev-parse',
  'rev-list',
  'describe',
  'shortlog',
  'name-rev',
  'check-ignore',
  'check-attr',
  'diff-tree',
  'diff-files',
  'diff-index',
  'whatchanged',
  'show-branch',
  'merge-base',
]);

/** `script [opts] [-c cmd] [file]`: runs `cmd` through the shell and records the session into `file` (default ./typescript). */
function decideScript(inv: Invocation, scope: GuardScope, state: ShellState, analyzer: ScriptAnalyzer): Refusal | undefined {
  const args = inv.argv.slice(1);
  const { operands, targets } = operandsOf(
    args,
    ['-E', '--echo', '-m', '--logging-format', '-o', '--output-limit'],
    ['-c', '--command', '-T', '--log-timing', '-I', '--log-in', '-O', '--log-out', '-B', '--log-io'],
  );
  const commandIndex = args.findIndex(
    (a) => a.value === '-c' || a.value === '--command' || (a.value ?? '').startsWith('--command=') || /^-[aefqt]*c$/.test(a.value ?? ''),
  );
  const logs = targets.filter((t) => {
    const k = args.indexOf(t);
    return !(k === commandIndex + 1 || (t.value ?? '').startsWith('--command='));
  });
  const bad = checkTargets(inv, [...logs, ...(operands.length > 0 ? operands.slice(0, 1) : [literalWord('typescript')])], scope, 'script', state);
  if (bad) return bad;
  if (commandIndex < 0) return refusal('shell_from_stdin', inv.text, '`script` without -c runs an interactive shell that reads commands from stdin');
  const inline = (args[commandIndex].value ?? '').startsWith('--command=') ? literalWord((args[commandIndex].value ?? '').slice(10)) : args[commandIndex + 1];
  const source = inline ? exactValue(inline) : undefined;
  if (source === undefined) {
    note(state, inv.text, 'the `script -c` command is computed at run time');
    return undefined;
  }
  return analyzer.script(source, nestedState(state, inv.cwd), { origin: '`script -c`', stdin: inv.stdin });
}

/** `watch [opts] cmd…`: the words are joined and run by `sh -c` (with `-x`, executed directly). */
function decideWatch(inv: Invocation, scope: GuardScope, state: ShellState, analyzer: ScriptAnalyzer, hops: number): Refusal | undefined {
  const args = inv.argv.slice(1);
  let k = 0;
  let direct = false;
  for (; k < args.length; k++) {
    const v = args[k].value;
    if (v === undefined)
      return refusal('dynamic_argument', inv.text, `\`${args[k].text}\` for \`watch\` is computed at run time; the guard cannot tell where the command starts`);
    if (v === '--') {
      k++;
      break;
    }
    if (!v.startsWith('-')) break;
    if (v === '-x' || v === '--exec') direct = true;
    else if (v === '-n' || v === '--interval' || v === '-q' || v === '--equexit') k++;
    else if (
      /^-[bcdegptwCrx]+$/.test(v) ||
      /^--(beep|color|no-color|differences.*|errexit|chgexit|precise|no-title|no-wrap|no-rerun|interval=.*|equexit=.*)$/.test(v)
    )
      continue;
    else return refusal('unresolved_launcher', inv.text, `\`${v}\` is not a \`watch\` option the guard models`);
  }
  const rest = args.slice(k);
  if (rest.length === 0) return undefined;
  if (direct) return decideInvocation({ ...inv, argv: rest }, scope, state, analyzer, hops + 1);
  const words = rest.map((w) => exactValue(w));
  if (words.some((w) => w === undefined)) return refusal('dynamic_argument', inv.text, 'the `watch` command is computed at run time');
  return analyzer.script(words.join(' '), nestedState(state, inv.cwd), { origin: '`watch`', stdin: inv.stdin });
}

/** `x --version` / `x --help` / `x -V`: asks a program about itself. */
const versionOnly = (args: readonly Word[]) => args.length === 1 && ['--version', '-V', '--help', '-h', 'version', '-v'].includes(args[0].value ?? '');

/** Names bash resolves before PATH (builtins and keywords the walker sees as command names). */
const BUILTIN_NAMES = new Set([
  'cd',
  'pushd',
  'popd',
  'dirs',
  'echo',
  'printf',
  'read',
  'test',
  '[',
  'true',
  'false',
  ':',
  'export',
  'declare',
  'typeset',
  'local',
  'readonly',
  'unset',
  'set',
  'shopt',
  'let',
  'eval',
  'source',
  '.',
  'exit',
  'return',
  'break',
  'continue',
  'shift',
  'trap',
  'wait',
  'type',
  'command',
  'builtin',
  'hash',
  'alias',
  'unalias',
  'getopts',
  'mapfile',
  'readarray',
  'kill',
  'jobs',
  'umask',
  'ulimit',
  'history',
  'fc',
  'enable',
  'help',
  'times',
  'caller',
  'disown',
  'compgen',
  'complete',
  'exec',
  'time',
  'coproc',
  'pwd',
]);

// Wrapper names that are also common subcommand words (`docker exec`, `hyperfine time`) are left out.
const LAUNCHER_NAMES_IGNORED = new Set(['command', 'builtin', 'exec', 'coproc', 'time', 'find', 'R']);

/** Names that, as an argument of an unknown program, suggest it launches them. */
function launchesByName(v: string): boolean {
  const b = posix.basename(v);
  if (LAUNCHER_NAMES_IGNORED.has(b)) return false;
  return (
    b === 'git' ||
    b.startsWith('git-') ||
    b === 'hub' ||
    POSIX_SHELLS.has(b) ||
    OTHER_SHELLS.has(b) ||
    interpreterGrammarFor(b) !== undefined ||
    Object.prototype.hasOwnProperty.call(WRAPPERS, b) ||
    b === 'eval' ||
    b === 'source'
  );
}

const LAUNCHED_CODE = /(^|[\s;&|(`'"=/])(git|sh|bash|zsh|dash|eval|source)(\s|$|[;&|)])/;

// ---------------------------------------------------------------------------------------------------------------
// Builtins that change the shell itself.

type BuiltinVerdict = Refusal | undefined | 'not_builtin';

function decideBuiltin(inv: Invocation, name: string, args: readonly Word[], scope: GuardScope, state: ShellState, analyzer: ScriptAnalyzer): BuiltinVerdict {
  const deny = (reason: GuardReason, why: string) => refusal(reason, inv.text, why);
  switch (name) {
    case 'eval':
      return deny('eval_or_source', '`eval` runs a string as code');
    case 'source':
    case '.':
      return deny('eval_or_source', `\`${name}\` runs a file (or process substitution) as code in this shell`);
    case 'fc':
      return deny('eval_or_source', '`fc` re-runs commands from history');
    case 'trap': {
      const values = args.map((a) => a.value);
      if (values.length === 0 || values.every((v) => v === '-l' || v === '-p' || (v !== undefined && /^-?[A-Z0-9]+$/.test(v) && values[0] === '-p')))
        return undefined;
      // Resetting (`trap - SIG`) or ignoring (`trap '' SIG`) a signal runs nothing.
      if ((values[0] === '' || values[0] === '-') && values.slice(1).every((v) => v !== undefined && /^[A-Z0-9+-]+$/.test(v))) return undefined;
      // A static action is code the guard can read: a policy violation in it is refused now. When and from where it
      // runs (on exit or a signal, from whatever directory the shell is in then) it cannot know: noted.
      const action = values[0] === '--' ? values[1] : values[0];
      if (action !== undefined && !action.startsWith('-')) {
        note(state, inv.text, '`trap` runs its action later (on exit or a signal), from whatever directory the shell is in then');
        return analyzer.script(action, nestedState(state, inv.cwd), { origin: 'a `trap` action', stdin: { kind: 'inherited' } });
      }
      return deny('trap', "`trap` runs its action later (on exit or a signal), outside the guard's view");
    }
    case 'alias':
      if (args.some((a) => a.value === undefined || a.value.includes('='))) return deny('function_or_alias', '`alias` defines a name that runs other commands');
      return undefined;
    case 'hash':
      if (args.some((a) => (a.value ?? '-p').startsWith('-') && (a.value ?? '-p').includes('p')))
        return deny('function_or_alias', '`hash -p` makes a command name run another program');
      return undefined;
    case 'enable':
      if (args.length > 0) return deny('function_or_alias', '`enable` turns builtins on or off, or loads new ones');
      return undefined;
    case 'shopt': {
      const set = args.some((a) => a.value === '-s');
      if (!set) return undefined;
      for (const a of args) {
        const v = a.value;
        if (v === undefined) return deny('dynamic_argument', 'the `shopt` option is computed at run time');
        if (v === 'expand_aliases') return deny('function_or_alias', '`shopt -s expand_aliases` lets aliases run');
        if (v === 'cdable_vars') state.dirVars = true; // `cd name` may then go wherever $name points
        if (v === 'extglob' || v === 'dotglob' || v === 'nocaseglob')
          return deny('parser_blind_spot', `\`shopt -s ${v}\` changes how later words parse or glob`);
      }
      return undefined;
    }
    case 'set':
      for (let k = 0; k < args.length; k++) {
        const v = args[k].value;
        if (v === '--' || v === '-') break;
        if (v === undefined) return deny('dynamic_argument', 'a `set` option is computed at run time');
        if (/^-[a-zA-Z]*k/.test(v)) return deny('parser_blind_spot', '`set -k` turns later `NAME=value` arguments into environment assignments');
        if (/^-[a-zA-Z]*a/.test(v) || (v === '-o' && args[k + 1]?.value === 'allexport')) {
          return deny('shell_env_override', '`set -a` exports every later assignment (for example a GIT_DIR set by `read` or `for`)');
        }
        if (v === '-o' && args[k + 1]?.value === 'keyword')
          return deny('parser_blind_spot', '`set -o keyword` turns later `NAME=value` arguments into environment assignments');
        if (/^-[a-zA-Z]*e/.test(v) || (v === '-o' && args[k + 1]?.value === 'errexit')) state.errexit = true;
        if (/^\+[a-zA-Z]*e/.test(v) || (v === '+o' && args[k + 1]?.value === 'errexit')) state.errexit = false;
        if (!v.startsWith('-') && !v.startsWith('+')) break;
      }
      return undefined;
    case 'cd':
    case 'pushd':
    case 'popd':
      changeDirectory(name, args, scope, state);
      return undefined;
    case 'export':
    case 'declare':
    case 'typeset':
    case 'local':
    case 'readonly':
      if (args.some((a) => /^-[a-zA-Z]*f/.test(a.value ?? '')) && (name === 'export' || args.some((a) => /^-[a-zA-Z]*x/.test(a.value ?? '')))) {
        return deny('function_or_alias', `\`${name} -f\` exports a function: every bash started later runs it in place of a command name`);
      }
      return declarationWords(inv, name, args, scope, state);
    case 'unset':
      for (const a of args) {
        if (a.value?.startsWith('-')) continue;
        const bad = nameArgument(inv, a, 'unset');
        if (bad) return bad;
      }
      return undefined;
    case 'read': {
      const valued = new Set(['-d', '-i', '-n', '-N', '-p', '-t', '-u']);
      for (let k = 0; k < args.length; k++) {
        const v = args[k].value;
        if (v === '-a') {
          const bad = args[k + 1] ? nameArgument(inv, args[++k], 'read -a') : undefined;
          if (bad) return bad;
          continue;
        }
        if (v !== undefined && valued.has(v)) {
          k++;
          continue;
        }
        if (v !== undefined && v.startsWith('-')) continue;
        const bad = nameArgument(inv, args[k], 'read') ?? readInto(inv, args[k], scope, state);
        if (bad) return bad;
      }
      return undefined;
    }
    case 'mapfile':
    case 'readarray': {
      if (args.some((a) => (a.value === undefined ? !a.prefix || a.prefix.startsWith('-') : /^-[a-zA-Z]*C/.test(a.value)))) {
        return deny('hidden_execution', `\`${name} -C\` runs a callback command (or an option is computed at run time)`);
      }
      const valued = new Set(['-d', '-n', '-O', '-s', '-u', '-c']);
      for (let k = 0; k < args.length; k++) {
        const v = args[k].value;
        if (v !== undefined && valued.has(v)) {
          k++;
          continue;
        }
        if (v !== undefined && v.startsWith('-')) continue;
        const bad = nameArgument(inv, args[k], name) ?? readInto(inv, args[k], scope, state);
        if (bad) return bad;
      }
      return undefined;
    }
    case 'printf':
    case 'wait':
      for (let k = 0; k < args.length; k++) {
        if (args[k].value === (name === 'printf' ? '-v' : '-p')) {
          const bad = args[k + 1] ? (nameArgument(inv, args[k + 1], `${name} ${args[k].value}`) ?? readInto(inv, args[k + 1], scope, state)) : undefined;
          if (bad) return bad;
        }
      }
      return undefined;
    case 'getopts':
      return args[1] ? (nameArgument(inv, args[1], 'getopts') ?? readInto(inv, args[1], scope, state)) : undefined;
    case 'test':
    case '[':
      for (let k = 0; k < args.length; k++) {
        if ((args[k].value === '-v' || args[k].value === '-R') && args[k + 1]) {
          const bad = nameArgument(inv, args[k + 1], `test ${args[k].value}`);
          if (bad) return bad;
        }
      }
      return undefined;
    case 'let': {
      // Each argument is an arithmetic expression: judged by where the values it names come from.
      let p: Provenance = 'clean';
      for (const a of args) {
        const v = exactValue(a);
        if (v === undefined) p = worst(p, 'runtime');
        else if (/[$`]/.test(v)) p = worst(p, 'attack');
        else p = arithmeticNames(v).reduce<Provenance>((q, n) => worst(q, provenanceOf(state.taint, n)), p);
      }
      if (p === 'attack') return deny('hidden_execution', '`let` evaluates code (`$(…)` or a backtick) held in its expression or in a variable it names');
      if (p === 'runtime') note(state, inv.text, '`let` evaluates a value read at run time as an expression; an array subscript in it runs code');
      return undefined;
    }
    case 'compgen':
    case 'complete':
      if (args.some((a) => a.value === undefined || /^-[a-zA-Z]*[CF]/.test(a.value)))
        return deny('eval_or_source', `\`${name} -C/-F\` runs a command or function`);
      return undefined;
    default:
      return 'not_builtin';
  }
}

const PLAIN_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\]|\[[@*]\])?$/;

/** `read GIT_DIR`, `printf -v PATH …`: a value read at run time lands in the variable (exported if it already is). */
function readInto(inv: Invocation, w: Word, scope: GuardScope, state: ShellState): Refusal | undefined {
  const name = (exactValue(w) ?? '').replace(/\[.*$/, '');
  const bad = checkAssignment(name, dynamicWord('input', `<${name} read at run time>`), 'persistent', inv.cwd, scope.worktree, inv.text, (why) =>
    note(state, inv.text, why),
  );
  if (bad) return bad;
  if (name === 'PATH') state.writablePath = true;
  return undefined;
}

/** Builtins that take variable names evaluate array subscripts in them: only plain literal names pass. */
function nameArgument(inv: Invocation, w: Word, what: string): Refusal | undefined {
  const v = exactValue(w);
  if (v !== undefined && PLAIN_NAME.test(v)) return undefined;
  return refusal('hidden_execution', inv.text, `\`${what} ${w.text}\`: a name that is computed or has a subscript can run code when bash evaluates it`);
}

function declarationWords(inv: Invocation, name: string, args: readonly Word[], scope: GuardScope, state: ShellState): Refusal | undefined {
  let integer = false;
  let nameref = false;
  for (const a of args) {
    const v = a.value;
    if (v !== undefined && /^[-+][a-zA-Z]+$/.test(v)) {
      if (v.startsWith('-') && v.includes('i')) integer = true;
      if (v.startsWith('-') && v.includes('n')) nameref = true;
      if (v.startsWith('-') && /[fF]/.test(v) && !/[aAgilnrtux]/.test(v)) return undefined; // prints functions
      continue;
    }
    const assignment = splitAssignmentWord(a);
    const target = assignment ? assignment.name : v;
    if (target === undefined || !PLAIN_NAME.test(target)) {
      return refusal('hidden_execution', inv.text, `\`${name} ${a.text}\`: a name that is computed or has a subscript can run code when bash evaluates it`);
    }
    const bad = declarationCheck(inv, name, target, assignment?.value, integer, nameref, scope, state);
    if (bad) return bad;
  }
  return undefined;
}

/** Shared by declaration commands as parsed (declaration_command) and as reached through wrappers. */
export function declarationCheck(
  inv: { text: string; cwd: Cwd },
  keyword: string,
  name: string,
  value: Word | undefined,
  integer: boolean,
  nameref: boolean,
  scope: GuardScope,
  state: ShellState,
): Refusal | undefined {
  if (integer) {
    return refusal('hidden_execution', inv.text, `\`${keyword} -i\` makes every assignment to \`${name}\` arithmetic, which can run code hidden in values`);
  }
  if (nameref) {
    return refusal('hidden_execution', inv.text, `\`${keyword} -n ${name}\`: a name reference redirects later assignments and expansions to another variable`);
  }
  const assigned = value ?? literalWord('');
  if (name === 'PATH' && value && pathIsWritable(assigned, inv.cwd, scope.worktree)) state.writablePath = true;
  return checkAssignment(name, assigned, 'persistent', inv.cwd, scope.worktree, inv.text, (why) => note(state, inv.text, why));
}

// ---------------------------------------------------------------------------------------------------------------
// cd / pushd / popd: the working directory for the rest of the list.

function changeDirectory(name: string, args: readonly Word[], scope: GuardScope, state: ShellState): void {
  const operands = args.filter((a, k) => !(a.value !== undefined && /^-[LPe@]+$/.test(a.value)) && !(a.value === '--' && k === 0));
  const go = (next: Cwd) => {
    state.oldCwd = state.cwd;
    state.cwd = state.dirVars ? { kind: 'unknown', why: `\`${name}\` after the command names PWD, OLDPWD, DIRSTACK or CDPATH` } : next;
  };
  if (name === 'popd') {
    if (operands.length > 0) return go({ kind: 'unknown', why: '`popd` with arguments' });
    const top = state.stack.pop();
    return go(top ?? { kind: 'unknown', why: '`popd` with an empty directory stack' });
  }
  if (name === 'pushd' && operands.length === 0) {
    const top = state.stack.pop();
    if (!top) return go({ kind: 'unknown', why: '`pushd` with an empty directory stack' });
    state.stack.push(state.cwd);
    return go(top);
  }
  if (name === 'pushd') state.stack.push(state.cwd);
  const target = operands[0];
  let next: Cwd;
  if (!target) next = { kind: 'unknown', why: '`cd` without an argument goes to $HOME' };
  else if (target.value === '-') next = state.oldCwd ?? { kind: 'unknown', why: '`cd -` with no previous directory' };
  else if (exactValue(target) === undefined) next = { kind: 'unknown', why: `\`${name} ${target.text}\` is computed at run time` };
  else if (name === 'pushd' && /^[+-]\d+$/.test(target.value as string)) next = { kind: 'unknown', why: '`pushd ±N` rotates the stack' };
  else next = resolvePath(state.cwd, target.value as string, scope.worktree);
  // In a loop body a relative `cd` can run any number of times.
  if (state.loopDepth > 0 && target && !(target.value ?? '').startsWith('/')) {
    const up = (target.value ?? '..').split('/').includes('..') || target.value === '-';
    next = up || next.kind === 'unknown' ? { kind: 'unknown', why: `\`${name}\` inside a loop` } : { kind: 'inside' };
    if (next.kind === 'inside' && state.cwd.kind === 'unknown') next = state.cwd;
  }
  go(next);
}

// ---------------------------------------------------------------------------------------------------------------
// Programs that write files named in their arguments.

type Writer = (inv: Invocation, args: readonly Word[], scope: GuardScope, state: ShellState) => Refusal | undefined;

/**
 * A write the text proves lands outside the worktree (or in git metadata) is refused; one whose target is only
 * known at run time is noted for the sandbox.
 */
export function judgeWrite(verdict: WriteVerdict, text: string, what: string, state: ShellState): Refusal | undefined {
  if (verdict.ok) return undefined;
  if (verdict.kind === 'dynamic' || verdict.kind === 'unsure') {
    note(state, text, `${what}: ${verdict.detail}`);
    return undefined;
  }
  return refusal(verdict.kind === 'metadata' ? 'git_metadata_write' : 'outside_worktree', text, `${what}: ${verdict.detail}`);
}

function checkTargets(inv: Invocation, words: readonly Word[], scope: GuardScope, program: string, state: ShellState): Refusal | undefined {
  for (const w of words) {
    const bad = judgeWrite(checkWriteTarget(w, inv.cwd, scope.worktree), inv.text, `\`${program}\``, state);
    if (bad) return bad;
  }
  return undefined;
}

/** Splits operands from options; `valued` options take the next word; `targetDir` options name a destination. */
function operandsOf(args: readonly Word[], valued: readonly string[] = [], targetDir: readonly string[] = []): { operands: Word[]; targets: Word[] } {
  const operands: Word[] = [];
  const targets: Word[] = [];
  let options = true;
  for (let k = 0; k < args.length; k++) {
    const w = args[k];
    const v = w.value;
    if (options && v === '--') {
      options = false;
      continue;
    }
    if (options && v !== undefined && v.startsWith('-') && v !== '-') {
      const eq = v.indexOf('=');
      const flag = eq < 0 ? v : v.slice(0, eq);
      if (targetDir.includes(flag)) {
        const value = eq >= 0 ? { ...w, value: v.slice(eq + 1), prefix: v.slice(eq + 1) } : args[++k];
        if (value) targets.push(value);
        continue;
      }
      if (targetDir.some((t) => t.length === 2 && v.startsWith(t) && v.length > 2 && !v.startsWith('--'))) {
        targets.push({ ...w, value: v.slice(2), prefix: v.slice(2) });
        continue;
      }
      if (valued.includes(flag) && eq < 0) k++;
      continue;
    }
    operands.push(w);
  }
  return { operands, targets };
}

const allOperands =
  (valued: string[] = []): Writer =>
  (inv, args, scope, state) => {
    const { operands } = operandsOf(args, valued);
    return checkTargets(inv, operands, scope, posix.basename(inv.argv[0].value ?? ''), state);
  };

const lastOperand =
  (valued: string[], allWritten = false): Writer =>
  (inv, args, scope, state) => {
    const { operands, targets } = operandsOf(args, valued, ['-t', '--target-directory']);
    const program = posix.basename(inv.argv[0].value ?? '');
    if (targets.length > 0) return checkTargets(inv, allWritten ? [...targets, ...operands] : targets, scope, program, state);
    if (operands.length === 0) return undefined;
    if (allWritten) return checkTargets(inv, operands, scope, program, state);
    const dest = operands.length === 1 && program === 'ln' ? literalWord('.') : operands[operands.length - 1];
    if (program === 'install' && args.some((a) => a.value === '-d' || a.value === '--directory')) return checkTargets(inv, operands, scope, program, state);
    return checkTargets(inv, [dest], scope, program, state);
  };

const afterFirst =
  (valued: string[] = []): Writer =>
  (inv, args, scope, state) => {
    const reference = args.some((a) => (a.value ?? '').startsWith('--reference'));
    const { operands } = operandsOf(args, valued);
    return checkTargets(inv, reference ? operands : operands.slice(1), scope, posix.basename(inv.argv[0].value ?? ''), state);
  };

const optionTargets =
  (flags: string[], valued: string[] = []): Writer =>
  (inv, args, scope, state) => {
    const { targets } = operandsOf(args, valued, flags);
    return checkTargets(inv, targets, scope, posix.basename(inv.argv[0].value ?? ''), state);
  };

const WRITERS: Record<string, Writer> = {
  rm: allOperands(),
  rmdir: allOperands(),
  unlink: allOperands(),
  shred: allOperands(['-n', '-s']),
  touch: allOperands(['-d', '-t', '-r']),
  mkdir: allOperands(['-m']),
  truncate: allOperands(['-s', '-r']),
  tee: allOperands(),
  mkfifo: allOperands(['-m']),
  chmod: afterFirst(),
  chown: afterFirst(),
  chgrp: afterFirst(),
  cp: (inv, args, scope, state) => {
    const bad = lastOperand(['-S', '--suffix'])(inv, args, scope, state);
    if (bad) return bad;
    // `cp -l` / `cp -s` make links, not copies: a write through one lands in the source.
    const links = args.some(
      (a) => /^(--link|--symbolic-link)$/.test(a.value ?? '') || (/^-[a-zA-Z]*[ls]/.test(a.value ?? '') && !(a.value ?? '').startsWith('--')),
    );
    return links ? checkLinkSources(inv, sourcesOf(args, ['-S', '--suffix']), scope, 'cp', state) : undefined;
  },
  install: lastOperand(['-m', '-o', '-g', '-S', '--mode', '--owner', '--group', '--suffix']),
  ln: (inv, args, scope, state) => {
    const bad = lastOperand(['-S', '--suffix'])(inv, args, scope, state);
    if (bad) return bad;
    return checkLinkSources(inv, sourcesOf(args, ['-S', '--suffix']), scope, 'ln', state, symlinkDirs(inv, args, scope));
  },
  link: (inv, args, scope, state) => {
    const { operands } = operandsOf(args);
    return checkTargets(inv, operands.slice(1, 2), scope, 'link', state) ?? checkLinkSources(inv, operands.slice(0, 1), scope, 'link', state);
  },
  split: (inv, args, scope, state) => {
    const { operands } = operandsOf(args, [
      '-a',
      '-b',
      '-C',
      '-l',
      '-n',
      '-t',
      '--additional-suffix',
      '--suffix-length',
      '--bytes',
      '--line-bytes',
      '--lines',
      '--number',
      '--separator',
    ]);
    return checkTargets(inv, [operands[1] ?? literalWord('x')], scope, 'split', state);
  },
  csplit: optionTargets(['-f', '--prefix'], ['-b', '-n', '--suffix-format', '--digits']),
  xxd: (inv, args, scope, state) => {
    const { operands } = operandsOf(args, ['-c', '-g', '-l', '-s', '-o', '-n', '-cols', '-groupsize', '-len', '-seek', '-offset', '-name']);
    return checkTargets(inv, operands.slice(1, 2), scope, 'xxd', state);
  },
  iconv: optionTargets(['-o', '--output'], ['-f', '-t', '--from-code', '--to-code']),
  history: (inv, args, scope, state) => {
    const writes = args.some((a) => /^-[a-zA-Z]*[wa]/.test(a.value ?? ''));
    if (!writes) return undefined;
    const { operands } = operandsOf(args, ['-d']);
    if (operands.length === 0) {
      note(state, inv.text, '`history -w/-a` writes $HISTFILE, wherever that points');
      return undefined;
    }
    return checkTargets(inv, operands, scope, 'history', state);
  },
  tar: (inv, args, scope, state) => {
    const bad = optionTargets(['-C', '--directory'], ['-f', '--file', '-T', '-X', '--exclude'])(inv, args, scope, state);
    if (bad) return bad;
    const mode = tarMode(args);
    if (mode.archive && /[cruA]/.test(mode.letters)) return checkTargets(inv, [mode.archive], scope, 'tar (archive)', state);
    if (mode.letters.includes('x') && (mode.letters.includes('P') || args.some((a) => a.value === '--absolute-names'))) {
      note(state, inv.text, '`tar -xP` writes members at the absolute paths the archive names');
    }
    return undefined;
  },
  mv: lastOperand(['-S', '--suffix'], true),
  rsync: (inv, args, scope, state) => {
    const { operands } = operandsOf(args, ['-e', '--rsh', '--exclude', '--include', '--filter', '-f']);
    const local = operands.filter((w) => !/^[^/]*:/.test(w.value ?? w.prefix));
    const removes = args.some((a) => a.value === '--remove-source-files');
    const dest = operands[operands.length - 1];
    const written = removes ? local : dest && local.includes(dest) ? [dest] : [];
    if (args.some((a) => (a.value ?? a.prefix).startsWith('-e') || (a.value ?? a.prefix).startsWith('--rsh'))) {
      return refusal('unresolved_launcher', inv.text, '`rsync -e` runs a remote shell command');
    }
    return checkTargets(inv, written, scope, 'rsync', state);
  },
  dd: (inv, args, scope, state) => {
    const targets = args
      .filter((a) => (a.value ?? a.prefix).startsWith('of='))
      .map((a) => (a.value !== undefined ? { ...a, value: a.value.slice(3), prefix: a.value.slice(3) } : { ...a, prefix: a.prefix.slice(3) }));
    return checkTargets(inv, targets, scope, 'dd', state);
  },
  sort: optionTargets(['-o', '--output'], ['-k', '-t', '-S', '-T', '--key', '--field-separator', '--buffer-size', '--temporary-directory']),
  uniq: (inv, args, scope, state) => {
    const { operands } = operandsOf(args, ['-f', '-s', '-w']);
    return checkTargets(inv, operands.slice(1, 2), scope, 'uniq', state);
  },
  patch: (inv, args, scope, state) => {
    const bad = optionTargets(['-o', '--output', '-d', '--directory'], ['-p', '-i', '--input', '-F', '-z', '-B', '-Y', '-r'])(inv, args, scope, state);
    if (bad) return bad;
    const { operands } = operandsOf(args, ['-p', '-i', '--input', '-F', '-z', '-B', '-Y', '-r']);
    if (operands.length > 0 || args.some((a) => a.value === '-o' || a.value === '--output' || (a.value ?? '').startsWith('--output='))) return undefined;
    // Without a file operand, patch writes the files its input names.
    if (inv.stdin.kind === 'literal' && !args.some((a) => (a.value ?? '').startsWith('-i') || (a.value ?? '').startsWith('--input'))) {
      const names = [...inv.stdin.text.matchAll(/^\+\+\+ (\S+)/gm)].map((m) => m[1]);
      for (const name of names) {
        const stripped = name.replace(/^[^/]*\//, '');
        const bad = checkTargets(
          inv,
          [literalWord(name), literalWord(stripped)].filter((w) => w.value !== '/dev/null'),
          scope,
          'patch',
          state,
        );
        if (bad) return bad;
      }
      return undefined;
    }
    note(state, inv.text, '`patch` writes the files its input names, which the guard cannot see');
    return undefined;
  },
  unzip: optionTargets(['-d'], ['-x']),
  curl: optionTargets(
    ['-o', '--output', '--output-dir', '-c', '--cookie-jar', '-D', '--dump-header', '--trace', '--trace-ascii', '--stderr'],
    ['-d', '-H', '-X', '-u', '-A', '-e', '-F', '--data', '--header', '--request', '--user'],
  ),
  wget: optionTargets(['-O', '--output-document', '-P', '--directory-prefix', '-o', '--output-file', '-a', '--append-output']),
};

/** The operands a link or copy reads from (everything but the destination). */
function sourcesOf(args: readonly Word[], valued: readonly string[]): Word[] {
  const { operands, targets } = operandsOf(args, valued, ['-t', '--target-directory']);
  if (targets.length > 0) return operands;
  return operands.length === 1 ? operands : operands.slice(0, -1);
}

/**
 * A link to a file outside the worktree (hard or symbolic) makes later writes and `git -C link …` land there unseen.
 * A source may be outside for reading only if it is under /tmp (which the child owns) or /dev/null-like.
 */
function checkLinkSources(
  inv: Invocation,
  sources: readonly Word[],
  scope: GuardScope,
  program: string,
  state: ShellState,
  linkDirs?: readonly Cwd[],
): Refusal | undefined {
  for (const w of sources) {
    // A symbolic link's relative target is resolved from the directory the link is in, not from where ln ran.
    const relative = linkDirs !== undefined && w.value !== undefined && !posix.isAbsolute(w.value);
    const verdicts = relative ? linkDirs.map((dir) => checkWriteTarget(w, dir, scope.worktree)) : [checkWriteTarget(w, inv.cwd, scope.worktree)];
    const verdict = verdicts.find((v) => !v.ok) ?? verdicts[0];
    if (verdict.ok) continue;
    if (verdict.kind === 'dynamic' || verdict.kind === 'unsure') {
      note(state, inv.text, `\`${program}\` links to \`${w.text}\`, known only at run time`);
      continue;
    }
    return refusal(
      verdict.kind === 'metadata' ? 'git_metadata_write' : 'outside_worktree',
      inv.text,
      `\`${program}\` links to \`${w.text}\`: ${verdict.detail}; a write through the link lands there`,
    );
  }
  return undefined;
}

/**
 * For `ln -s` without `-r`: the directories the link may land in, from which its relative targets resolve — the
 * `-t` directory, or the last operand's directory and the last operand itself (when it names a directory, the link
 * goes inside it). Undefined for hard links and `-r` (targets are then taken from the current directory).
 */
function symlinkDirs(inv: Invocation, args: readonly Word[], scope: GuardScope): Cwd[] | undefined {
  const symbolic = args.some((a) => a.value === '--symbolic' || /^-[a-zA-Z]*s/.test(a.value ?? ''));
  const relative = args.some((a) => a.value === '--relative' || /^-[a-zA-Z]*r/.test(a.value ?? ''));
  if (!symbolic || relative || args.some((a) => a.value === undefined)) return undefined;
  const { operands, targets } = operandsOf(args, ['-S', '--suffix'], ['-t', '--target-directory']);
  const at = (p: string) => resolvePath(inv.cwd, p, scope.worktree);
  if (targets.length > 0) return targets.map((t) => at(t.value ?? '.'));
  if (operands.length < 2) return [inv.cwd];
  const dest = operands[operands.length - 1].value ?? '.';
  return [at(posix.dirname(dest)), at(dest)];
}

/** Which programs count as git or a shell when copied or linked under another name. */
function launchesWhenRenamed(path: string): boolean {
  const b = programName(posix.basename(path));
  return (
    b === 'git' ||
    b === 'hub' ||
    POSIX_SHELLS.has(b) ||
    OTHER_SHELLS.has(b) ||
    interpreterGrammarFor(b) !== undefined ||
    Object.prototype.hasOwnProperty.call(WRAPPERS, b) ||
    /^\/proc\/(self|\d+)\/exe$/.test(path)
  );
}

/** tar's mode letters (old style `czf`, clusters `-czf`, long `--create`) and the archive it names. */
function tarMode(args: readonly Word[]): { letters: string; archive?: Word } {
  let letters = '';
  let archive: Word | undefined;
  const longModes: Record<string, string> = {
    '--create': 'c',
    '--append': 'r',
    '--update': 'u',
    '--catenate': 'A',
    '--concatenate': 'A',
    '--extract': 'x',
    '--get': 'x',
  };
  for (let k = 0; k < args.length; k++) {
    const v = args[k].value ?? '';
    if (longModes[v]) letters += longModes[v];
    else if (v === '--file' || v === '-f') archive = args[++k];
    else if (v.startsWith('--file=')) archive = { ...args[k], value: v.slice(7), prefix: v.slice(7) };
    else if ((k === 0 && /^[A-Za-z]+$/.test(v)) || /^-[A-Za-z]+$/.test(v)) {
      const cluster = v.replace(/^-/, '');
      letters += cluster;
      const f = cluster.indexOf('f');
      if (f >= 0) archive = f === cluster.length - 1 ? args[++k] : literalWord(cluster.slice(f + 1));
    }
  }
  return { letters, archive };
}

/** Options whose value is a path the program writes, for programs whose other arguments are data or code. */
const OUTPUT_OPTIONS: Record<string, readonly string[]> = {
  gcc: ['-o'],
  cc: ['-o'],
  'g++': ['-o'],
  'c++': ['-o'],
  clang: ['-o'],
  'clang++': ['-o'],
  tcc: ['-o'],
  ld: ['-o'],
  as: ['-o'],
  strip: ['-o'],
  rustc: ['-o', '--out-dir'],
  javac: ['-d', '-h', '-s'],
  go: ['-o'],
  tsc: ['--outDir', '--outFile', '--declarationDir', '--tsBuildInfoFile'],
  esbuild: ['--outfile', '--outdir'],
  cargo: ['--target-dir', '--out-dir', '--artifact-dir'],
  npm: ['--prefix'],
  pip: ['--target', '-t'],
  pip3: ['--target', '-t'],
};

// ---------------------------------------------------------------------------------------------------------------
// GitHub / GitLab CLIs: their merge and checkout verbs integrate or switch branches from outside git.

function decideForge(inv: Invocation, base: string, args: readonly Word[]): Refusal | undefined {
  const words = args.filter((a) => !(a.value ?? '-').startsWith('-')).map((a) => a.value);
  const [group, action] = words;
  const request = base === 'gh' ? 'pr' : 'mr';
  if (group === request && action === 'merge') {
    return refusal('integration_policy', inv.text, `\`${base} ${request} merge\` integrates branches on the forge; that is the orchestrator's job`);
  }
  if (group === request && (action === 'checkout' || action === 'co')) {
    return refusal('switches_branch', inv.text, `\`${base} ${request} checkout\` switches this worktree to another branch`);
  }
  if (group === 'repo' && action === 'sync') return refusal('moves_other_ref', inv.text, `\`${base} repo sync\` moves local or remote branches`);
  if (group === 'api') {
    // Fields make `gh api` default to POST.
    const fields = args.some((a) => /^(-[fF]|--field|--raw-field|--input)/.test(a.value ?? a.prefix));
    const method = args.findIndex((a) => a.value === '-X' || a.value === '--method');
    if (fields && method < 0 && !args.some((a) => /^(-X|--method=)/.test(a.value ?? '') && (a.value ?? '').length > 2)) {
      return refusal('moves_other_ref', inv.text, `\`${base} api\` with fields sends a POST, which can change remote refs and pull requests`);
    }
    for (let k = 0; k < args.length; k++) {
      const v = args[k].value ?? '';
      const method =
        v === '-X' || v === '--method'
          ? args[k + 1]?.value
          : v.startsWith('--method=')
            ? v.slice(9)
            : v.startsWith('-X') && v.length > 2
              ? v.slice(2)
              : undefined;
      if (method !== undefined && method.toUpperCase() !== 'GET') {
        return refusal('moves_other_ref', inv.text, `\`${base} api -X ${method}\` can change remote refs and pull requests directly`);
      }
    }
  }
  return undefined;
}

/** Options that make an otherwise ordinary program run a command (prefix match on the word). */
const EXEC_OPTIONS: Record<string, readonly string[]> = {
  sort: ['--compress-program'],
  split: ['--filter'],
  zip: ['-TT', '--unzip-command'],
  tar: ['--to-command', '--checkpoint-action', '-I', '--use-compress-program', '--rsh-command', '--info-script', '--new-volume-script', '-F'],
  less: ['+', '-+'],
  more: ['+'],
  man: ['-P', '--pager', '-H', '--html'],
  bat: ['--pager'],
  batcat: ['--pager'],
  rg: ['--pre'],
  fd: ['-x', '--exec', '-X', '--exec-batch'],
  fdfind: ['-x', '--exec', '-X', '--exec-batch'],
};

// ---------------------------------------------------------------------------------------------------------------
// Programs whose arguments are data: `echo "git merge"` and `grep -r checkout .` never refuse.

const DATA_ONLY = new Set([
  'echo',
  'printf',
  'cat',
  'tac',
  'nl',
  'head',
  'tail',
  'less',
  'more',
  'most',
  'bat',
  'batcat',
  'grep',
  'egrep',
  'fgrep',
  'rg',
  'ag',
  'ack',
  'ls',
  'tree',
  'wc',
  'cut',
  'tr',
  'paste',
  'join',
  'column',
  'fold',
  'fmt',
  'expand',
  'unexpand',
  'rev',
  'od',
  'hexdump',
  'strings',
  'file',
  'stat',
  'du',
  'df',
  'pwd',
  'basename',
  'dirname',
  'realpath',
  'readlink',
  'which',
  'whereis',
  'type',
  'date',
  'sleep',
  'true',
  'false',
  ':',
  'seq',
  'yes',
  'printenv',
  'id',
  'whoami',
  'uname',
  'hostname',
  'test',
  '[',
  'jq',
  'yq',
  'diff',
  'cmp',
  'comm',
  'md5sum',
  'sha1sum',
  'sha256sum',
  'sha512sum',
  'b2sum',
  'cksum',
  'base64',
  'base32',
  'man',
  'help',
  'info',
  'tput',
  'clear',
  'locale',
  'nproc',
  'free',
  'uptime',
  'ps',
  'pgrep',
  'lsof',
  'dirs',
  'jobs',
  'kill',
  'ulimit',
  'umask',
  'shift',
  'return',
  'exit',
  'break',
  'continue',
  'getconf',
  'tty',
  'wait',
  'times',
  'unalias',
  'caller',
  'disown',
  'logout',
  'fd',
  'fdfind',
  'locate',
  'sha224sum',
  'sha384sum',
  'zcat',
  'zgrep',
  'bzcat',
  'xzcat',
  'numfmt',
  'factor',
  'expr',
  'tsc',
  'jest',
  'eslint',
  'prettier',
  'gcc',
  'cc',
  'g++',
  'c++',
  'clang',
  'clang++',
  'tcc',
  'ld',
  'as',
  'strip',
  'rustc',
  'javac',
  'esbuild',
]);

/** Programs that run a command given as a string (or argv) in ways not modelled: refused when it looks like one. */
const STRING_LAUNCHERS = new Set([
  'su',
  'runuser',
  'ssh',
  'parallel',
  'tmux',
  'screen',
  'expect',
  'at',
  'batch',
  'hyperfine',
  'entr',
  'nodemon',
  'dtach',
  'systemd-run',
  'nsenter',
  'unshare',
  'chroot',
  'bwrap',
  'firejail',
  'strace',
  'ltrace',
  'valgrind',
  'gdb',
  'perf',
  'taskset',
  'chrt',
  'numactl',
  'prlimit',
  'cgexec',
  'catchsegv',
  'sg',
  'docker',
  'podman',
  'kubectl',
  'npx',
  'pnpm',
  'yarn',
  'bunx',
  'uvx',
  'pipx',
  'npm',
  'make',
  'cron',
  'crontab',
  'setpriv',
  'pkexec',
  'daemonize',
  'start-stop-daemon',
  'xterm',
  'sshpass',
  'sqlite3',
  'psql',
  'mysql',
  'duckdb',
  'cargo',
  'go',
  'apt-get',
  'apt',
  'dpkg',
  'yum',
  'dnf',
  'apk',
  'brew',
  'pip',
  'pip3',
]);
