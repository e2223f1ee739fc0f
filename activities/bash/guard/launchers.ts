import type { Invocation } from './invocation';
import { checkWriteTarget } from './paths';
import { refusal, type GuardReason, type Refusal } from './reasons';
import { exactValue, type Word } from './words';

/**
 * Programs that take code as text: shells (`-c` strings are parsed again, recursively), interpreters, awk, sed and
 * editors. Interpreter code is neither judged safe nor refused by reading it: whatever its strings say, it is
 * `unsure` and the sandbox decides. Where the text shows more than "unknown" (it spawns git or a shell, it loads a
 * module by a computed name) the note carries `inline_interpreter`, the refusal it becomes with the guard alone.
 */

/** Reports something the guard cannot judge. */
/** Notes what the guard cannot judge; `reason` is the refusal it becomes when no sandbox confines the command. */
export type Unsure = (why: string, reason?: GuardReason) => void;

/** Program stems that ship with version suffixes (`python3.11`, `node20`, `perl5.36`, `gawk-5.1`, `bash5`). */
const VERSIONED =
  /^(python|pypy|node|nodejs|perl|ruby|php|lua|luajit|tclsh|wish|bash|sh|zsh|dash|ksh|mksh|gawk|awk|mawk|git|deno|bun|Rscript|pwsh|vim|nvim|make|gmake)[-_.]?v?[0-9][0-9.]*$/;

/** The program a name runs, without a version suffix: `python3.11` is python, `node20` is node. */
export function programName(name: string): string {
  const m = VERSIONED.exec(name);
  return m ? m[1] : name;
}

export const POSIX_SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'ash', 'yash', 'posh', 'rbash', 'lksh', 'oksh', 'loksh', 'pdksh', 'ksh93']);
export const OTHER_SHELLS = new Set(['fish', 'csh', 'tcsh', 'nu', 'elvish', 'xonsh', 'rc', 'es']);

export type ShellPlan =
  | { readonly kind: 'script'; readonly source: string; readonly zsh: boolean }
  | { readonly kind: 'file' }
  | { readonly kind: 'refuse'; readonly refusal: Refusal };

/** How a POSIX shell invocation gets its code. */
export function planShell(inv: Invocation, name: string): ShellPlan {
  const deny = (reason: Parameters<typeof refusal>[0], why: string): ShellPlan => ({ kind: 'refuse', refusal: refusal(reason, inv.text, why) });
  const argv = inv.argv;
  let cmode = false;
  let smode = false;
  let k = 1;
  for (; k < argv.length; k++) {
    const v = exactValue(argv[k]);
    if (v === undefined) {
      if (argv[k].prefix === '' && argv[k].dynamic !== 'process_substitution')
        return deny('dynamic_argument', `\`${argv[k].text}\` for \`${name}\` is computed at run time`);
      if (argv[k].prefix.startsWith('-')) return deny('dynamic_argument', `\`${argv[k].text}\` for \`${name}\` is computed at run time`);
      break;
    }
    if (v === '--' || v === '-') {
      k++;
      break;
    }
    if (v.startsWith('--')) {
      if (v === '--rcfile' || v === '--init-file') {
        k++;
        continue;
      }
      if (
        [
          '--login',
          '--noprofile',
          '--norc',
          '--posix',
          '--restricted',
          '--verbose',
          '--noediting',
          '--version',
          '--help',
          '--dump-strings',
          '--dump-po-strings',
          '--wordexp',
        ].includes(v)
      )
        continue;
      return deny('unresolved_launcher', `\`${name} ${v}\` is not modelled`);
    }
    if (!/^[-+][A-Za-z]+$/.test(v)) break;
    for (const c of v.slice(1)) {
      if (c === 'c') cmode = true;
      else if (c === 's') smode = true;
      else if (c === 'o' || c === 'O') {
        const opt = argv[++k] ? exactValue(argv[k]) : undefined;
        if (opt === undefined) return deny('dynamic_argument', `the \`${name} -${c}\` option name is computed at run time`);
        if (c === 'O' && v.startsWith('-') && ['expand_aliases', 'extglob', 'dotglob'].includes(opt)) {
          return deny('parser_blind_spot', `\`${name} -O ${opt}\` changes how the code parses or what names mean`);
        }
        if (opt === 'keyword' && v.startsWith('-'))
          return deny('parser_blind_spot', '`-o keyword` turns later `NAME=value` arguments into environment assignments');
        if (opt === 'allexport' && v.startsWith('-')) return deny('shell_env_override', `\`${name} -o allexport\` exports every assignment the code makes`);
      } else if (c === 'a' && v.startsWith('-')) {
        return deny('shell_env_override', `\`${name} -a\` exports every assignment the code makes`);
      } else if (c === 'k' && v.startsWith('-')) {
        return deny('parser_blind_spot', '`-k` turns later `NAME=value` arguments into environment assignments');
      }
    }
  }
  const rest = argv.slice(k);
  if (cmode) {
    if (rest.length === 0) {
      return inv.trailingDynamic ? deny('dynamic_argument', `the \`${name} -c\` code comes from input at run time`) : { kind: 'file' };
    }
    const source = exactValue(rest[0]);
    if (source === undefined) return deny('dynamic_argument', `the code for \`${name} -c\` (\`${rest[0].text}\`) is computed at run time`);
    return { kind: 'script', source, zsh: name === 'zsh' };
  }
  if (smode || rest.length === 0) {
    if (rest.length === 0 && inv.trailingDynamic) return deny('dynamic_argument', `the script for \`${name}\` comes from input at run time`);
    return deny('shell_from_stdin', `\`${name}\` without -c reads its commands from stdin (a pipe, heredoc, here-string or the tool's input)`);
  }
  const file = rest[0];
  const path = exactValue(file);
  if (path === undefined) {
    if (file.dynamic === 'process_substitution') return deny('shell_from_stdin', `\`${name} <(…)\` runs code produced at run time`);
    return deny('dynamic_argument', `the script path for \`${name}\` (\`${file.text}\`) is computed at run time`);
  }
  if (/^\/dev\/(stdin|fd\/\d+)$|^\/proc\/[^/]+\/fd\/\d+$/.test(path)) return deny('shell_from_stdin', `\`${name} ${path}\` reads its commands from stdin`);
  return { kind: 'file' };
}

/** zsh constructs that run code but mean something inert (or nothing) to a bash parser. */
export function zshBlindSpot(source: string): string | undefined {
  if (/[^\s;&|(){}$]\((e|\+)/.test(source)) return 'a zsh glob qualifier `(e:…:)` / `(+…)` runs code';
  if (/(^|[\s;&|])=\(/.test(source)) return 'zsh `=(…)` runs a command';
  if (/\$\{\(/.test(source)) return 'zsh parameter flags `${(…)…}` can expand code';
  return undefined;
}

// A plain attack in inline code: an API that starts processes together with git or a shell, or a module or
// function reached by a computed name (how one hides the first). Anything else is noted, not judged safe.
const SPAWN_API =
  /child_process|subprocess|\bos\s*\.\s*(system|exec\w*|spawn\w*|popen|posix_spawn\w*)|\bpopen\b|\bsystem\s*\(|\bsystem\s+["'(]|`|%x|\bqx\b|IO\.popen|Open3|\bexec[lv]?p?e?\s*\(|execSync|execFile|\bspawn(Sync)?\s*\(|\bpty\b|Deno\s*\.\s*(run|Command)|Bun\s*\.\s*spawn|shell_exec|passthru|proc_open|pcntl_exec|do shell script|os\.execute|io\.popen|Runtime\s*\.\s*getRuntime|ProcessBuilder|Start-Process|Invoke-Expression|\biex\b|open\s*\(?[^)]*\|/i;
const PROGRAM_NAMES = /\b(git|sh|bash|zsh|dash|ksh|hub)\b/;
const COMPUTED_LOAD =
  /__import__|importlib|getattr\s*\(|ctypes|process\.binding|new\s+Function|\bFunction\s*\(|(require|import)\s*\(\s*(?!(?<q>['"])[^'"]*\k<q>\s*\))|\beval\s*\(\s*(?!(?<r>['"])[^'"]*\k<r>\s*\))/;

/** A plain attack the text proves, or undefined (which does not make the code safe: see `Unsure`). */
function inlineCodeProblem(code: string): string | undefined {
  const spawn = SPAWN_API.exec(code);
  const program = PROGRAM_NAMES.exec(code);
  if (spawn && program) return `the inline code starts a process (\`${spawn[0]}\`) and names \`${program[0]}\`: run git or the shell command directly instead`;
  const hidden = COMPUTED_LOAD.exec(code);
  if (hidden) return `the inline code reaches a module or function by a computed name (\`${hidden[0]}\`), which hides what it runs`;
  return undefined;
}

interface InterpreterGrammar {
  /** Short options whose value (attached or next word) is code. */
  readonly code: string;
  /** Long options whose value is code. */
  readonly codeLong?: readonly string[];
  /** Options that take a value that is not code. */
  readonly valued?: readonly string[];
  /** Options after which the rest is arguments to a module/program (not code we can see): allowed. */
  readonly module?: readonly string[];
  /** Options that are refused outright. */
  readonly refused?: readonly string[];
}

const INTERPRETERS: Record<string, InterpreterGrammar> = {
  python: { code: 'c', valued: ['-W', '-X', '--check-hash-based-pycs'], module: ['-m'] },
  node: {
    code: 'ep',
    codeLong: ['--eval', '--print'],
    valued: ['-r', '--require', '--import', '--loader', '--experimental-loader', '--input-type', '-C', '--conditions', '--env-file', '--title'],
  },
  bun: { code: 'ep', codeLong: ['--eval', '--print'], valued: ['-r', '--preload', '--cwd', '--env-file'] },
  perl: { code: 'eE', valued: ['-I', '-M', '-m', '-x', '-d', '-D', '-C'] },
  ruby: { code: 'e', valued: ['-I', '-r', '-C', '-E', '-F', '-T', '-x'] },
  php: { code: 'rBRE', valued: ['-c', '-d', '-z', '-t', '-F'], module: ['-f'] },
  lua: { code: 'e', valued: ['-l'] },
  Rscript: { code: 'e', valued: [] },
  R: { code: 'e', valued: [] },
  osascript: { code: 'e', valued: ['-l', '-s'] },
  pwsh: {
    code: 'c',
    codeLong: ['-Command', '-command', '-c'],
    valued: ['-WorkingDirectory', '-wd', '-ExecutionPolicy', '-ep'],
    module: ['-File', '-f'],
    refused: ['-EncodedCommand', '-enc', '-ec', '-e'],
  },
  tclsh: { code: '', valued: [] },
  deno: { code: '', valued: [] },
};

export function interpreterGrammarFor(name: string): InterpreterGrammar | undefined {
  if (/^python[0-9.]*$|^pypy[0-9.]*$/.test(name)) return INTERPRETERS.python;
  if (name === 'nodejs') return INTERPRETERS.node;
  if (name === 'luajit') return INTERPRETERS.lua;
  if (name === 'powershell') return INTERPRETERS.pwsh;
  if (name === 'wish') return INTERPRETERS.tclsh;
  return Object.prototype.hasOwnProperty.call(INTERPRETERS, name) ? INTERPRETERS[name] : undefined;
}

/** Inline code, a script file, a module, or stdin: plain attacks are refused, the rest is noted for the sandbox. */
export function decideInterpreter(inv: Invocation, name: string, grammar: InterpreterGrammar, unsure: Unsure): Refusal | undefined {
  const argv = inv.argv;
  if (argv.length === 2 && ['--version', '-V', '--help', '-h', '-v'].includes(argv[1].value ?? '')) return undefined;
  if (name === 'deno') {
    if (argv[1]?.value === 'eval') return codeVerdict(inv, argv[2], name, unsure);
    unsure(`\`deno\` runs a program the guard does not read`);
    return undefined;
  }
  let sawCode = false;
  for (let k = 1; k < argv.length; k++) {
    const w = argv[k];
    const v = w.value;
    if (v === undefined) {
      if (sawCode) return undefined;
      unsure(`\`${w.text}\` for \`${name}\` is computed at run time and may be code`);
      return undefined;
    }
    if (v === '--') break;
    if (v === '-') return stdinVerdict(inv, name, unsure);
    if (grammar.refused?.some((r) => v === r || v.startsWith(`${r}:`))) {
      unsure(`\`${name} ${v}\` runs encoded code`, 'inline_interpreter');
      return undefined;
    }
    const long = grammar.codeLong?.find((o) => v === o || v.startsWith(`${o}=`));
    if (long) {
      const code = v.includes('=') ? { ...w, value: v.slice(v.indexOf('=') + 1) } : argv[++k];
      const bad = codeVerdict(inv, code, name, unsure);
      if (bad) return bad;
      sawCode = true;
      continue;
    }
    if (name === 'node' && (v === '--test' || v.startsWith('--test='))) {
      unsure('`node --test` runs the test files it finds on disk, which the guard does not read');
      return undefined;
    }
    if (grammar.module?.includes(v)) {
      unsure(`\`${name} ${v} ${argv[k + 1]?.text ?? ''}\` runs a module the guard does not read`);
      return undefined;
    }
    if (grammar.valued?.includes(v)) {
      if (['-r', '--require', '--import', '--loader', '--experimental-loader', '--preload', '-M', '-m', '-I', '-l'].includes(v)) {
        unsure(`\`${name} ${v} ${argv[k + 1]?.text ?? ''}\` loads code the guard does not read`);
      }
      k++;
      continue;
    }
    if (grammar.valued?.some((o) => o.length === 2 && v.startsWith(o) && v.length > 2)) continue;
    if (v.startsWith('-') && !v.startsWith('--') && grammar.code) {
      const body = v.slice(1);
      const at = [...body].findIndex((c) => grammar.code.includes(c));
      if (at >= 0) {
        const attached = body.slice(at + 1);
        const code = attached ? { ...w, value: attached } : argv[++k];
        const bad = codeVerdict(inv, code, name, unsure);
        if (bad) return bad;
        sawCode = true;
        continue;
      }
      if (grammar.module?.some((m) => body.includes(m.slice(1)))) {
        unsure(`\`${name} ${v}\` runs a module the guard does not read`);
        return undefined;
      }
      continue;
    }
    if (v.startsWith('-')) continue;
    // The first operand: a script file (after inline code, it is an argument to the code).
    if (!sawCode) unsure(`\`${name} ${v}\` runs a script file the guard does not read`);
    return undefined;
  }
  if (sawCode) return undefined;
  return stdinVerdict(inv, name, unsure);
}

function codeVerdict(inv: Invocation, code: Word | undefined, name: string, unsure: Unsure): Refusal | undefined {
  if (!code) return undefined;
  const text = exactValue(code);
  if (text === undefined) {
    unsure(`the inline code for \`${name}\` is computed at run time`);
    return undefined;
  }
  const problem = inlineCodeProblem(text);
  if (problem) unsure(`\`${name}\`: ${problem}`, 'inline_interpreter');
  else unsure(`inline \`${name}\` code: the guard does not read what it does`);
  return undefined;
}

/** Code from stdin: the tool's own stdin is empty (/dev/null); anything fed into it is code the guard cannot judge. */
function stdinVerdict(inv: Invocation, name: string, unsure: Unsure): Refusal | undefined {
  if (inv.stdin.kind === 'inherited') return undefined;
  if (inv.stdin.kind === 'literal') {
    const problem = inlineCodeProblem(inv.stdin.text);
    if (problem) unsure(`\`${name}\` reads code from a heredoc or here-string: ${problem}`, 'inline_interpreter');
    else unsure(`\`${name}\` runs code from a heredoc or here-string: the guard does not read what it does`);
    return undefined;
  }
  unsure(`\`${name}\` reads its code from stdin (${inv.stdin.kind}), which the guard cannot see`);
  return undefined;
}

// awk: system(), getline from a command and output pipes run programs; gawk can load extensions.
const AWK_SPAWN = /\bsystem\b|\|\s*getline|\|&|(^|[^|])\|(?!\|)/;
const AWK_LOAD = /@load|@include|extension\s*\(/;
/** `print > "file"` / `printf … >> "file"`: awk opens the file itself. */
const AWK_OUTPUT = /\b(print|printf)\b[^;{}\n]*?>>?\s*("([^"\\]|\\.)*"|[^\s;}]+)/g;

export function decideAwk(inv: Invocation, name: string, worktree: string, unsure: Unsure): Refusal | undefined {
  const deny = (reason: Parameters<typeof refusal>[0], why: string) => refusal(reason, inv.text, why);
  const argv = inv.argv;
  const programs: Word[] = [];
  let fromFile = false;
  let k = 1;
  for (; k < argv.length; k++) {
    const v = argv[k].value;
    if (v === undefined) {
      if (programs.length > 0 || fromFile) break;
      return deny('dynamic_argument', `\`${argv[k].text}\` for \`${name}\` is computed at run time and may be the program`);
    }
    if (v === '--') {
      k++;
      break;
    }
    if (['-l', '--load', '-E', '--exec'].some((o) => v === o || v.startsWith(`${o}=`)) || (v.startsWith('-l') && v.length > 2)) {
      unsure(`\`${name} ${v}\` loads an extension or program the guard cannot see`, 'inline_interpreter');
      return undefined;
    }
    if (v === '-f' || v === '--file' || v === '-i' || v === '--include') {
      fromFile = true;
      unsure(`\`${name} ${v} ${argv[k + 1]?.text ?? ''}\` runs an awk program from a file the guard does not read`);
      k++;
      continue;
    }
    if (v === '-e' || v === '--source') {
      if (argv[k + 1]) programs.push(argv[++k]);
      continue;
    }
    if (v === '-F' || v === '-v' || v === '--field-separator' || v === '--assign') {
      k++;
      continue;
    }
    if (v.startsWith('-') && v !== '-') continue;
    break;
  }
  if (programs.length === 0 && !fromFile && argv[k]) programs.push(argv[k]);
  for (const p of programs) {
    const text = exactValue(p);
    if (text === undefined) {
      unsure(`the \`${name}\` program is computed at run time`);
      continue;
    }
    const load = AWK_LOAD.exec(text);
    if (load) unsure(`the \`${name}\` program loads \`${load[0]}\`, code the guard cannot see`, 'inline_interpreter');
    const m = AWK_SPAWN.exec(text);
    if (m) {
      const program = PROGRAM_NAMES.exec(text);
      if (program) unsure(`the \`${name}\` program runs commands (\`${m[0].trim() || '|'}\`) and names \`${program[0]}\``, 'inline_interpreter');
      else unsure(`the \`${name}\` program runs commands (\`${m[0].trim() || '|'}\`) built at run time`);
    }
    for (const out of text.matchAll(AWK_OUTPUT)) {
      const target = out[2];
      if (!target.startsWith('"')) {
        unsure(`the \`${name}\` program writes to \`${target}\`, a file named at run time`);
        continue;
      }
      const path = target.slice(1, -1);
      const verdict = path.startsWith('/dev/')
        ? { ok: true as const }
        : checkWriteTarget({ text: path, value: path, prefix: path, splits: false, glob: false }, inv.cwd, worktree);
      if (!verdict.ok)
        return deny(verdict.kind === 'metadata' ? 'git_metadata_write' : 'outside_worktree', `the \`${name}\` program writes \`${path}\`: ${verdict.detail}`);
    }
  }
  return undefined;
}

export function decideSed(inv: Invocation, worktree: string, unsure: Unsure): Refusal | undefined {
  const deny = (reason: Parameters<typeof refusal>[0], why: string) => refusal(reason, inv.text, why);
  const argv = inv.argv;
  const scripts: Word[] = [];
  const files: Word[] = [];
  let inPlace = false;
  let sandbox = false;
  let explicit = false;
  for (let k = 1; k < argv.length; k++) {
    const w = argv[k];
    const v = w.value;
    if (v === undefined) {
      if (scripts.length > 0 || explicit) {
        files.push(w);
        continue;
      }
      return deny('dynamic_argument', `\`${w.text}\` for \`sed\` is computed at run time and may be the script`);
    }
    if (v === '-e' || v === '--expression') {
      if (argv[k + 1]) scripts.push(argv[++k]);
      explicit = true;
      continue;
    }
    if (v.startsWith('--expression=')) {
      scripts.push({ ...w, value: v.slice('--expression='.length) });
      explicit = true;
      continue;
    }
    if (v === '-f' || v === '--file') {
      k++;
      explicit = true;
      continue;
    }
    if (v.startsWith('--file=')) {
      explicit = true;
      continue;
    }
    if (v === '--sandbox') {
      sandbox = true;
      continue;
    }
    if (v === '-i' || v.startsWith('--in-place') || (/^-[a-zA-Z]*i/.test(v) && !v.startsWith('--'))) {
      if (/^-[nErsuz]*i/.test(v) || v.startsWith('--in-place')) inPlace = true;
      if (/^-[a-zA-Z]*e$/.test(v) && argv[k + 1]) {
        scripts.push(argv[++k]);
        explicit = true;
      }
      continue;
    }
    if (v === '-l' || v === '--line-length') {
      k++;
      continue;
    }
    if (/^-[a-zA-Z]*e$/.test(v) && !v.startsWith('--')) {
      if (argv[k + 1]) scripts.push(argv[++k]);
      explicit = true;
      continue;
    }
    if (v.startsWith('-') && v !== '-') continue;
    if (!explicit && scripts.length === 0) scripts.push(w);
    else files.push(w);
  }
  if (!sandbox) {
    for (const s of scripts) {
      const text = exactValue(s);
      if (text === undefined) return deny('inline_interpreter', 'the sed script is computed at run time');
      const problem = sedScriptProblem(text, (target) => {
        const verdict = checkWriteTarget({ text: target, value: target, prefix: target, splits: false, glob: false }, inv.cwd, worktree);
        return verdict.ok ? undefined : verdict.detail;
      });
      if (problem) return deny(problem.reason, `sed: ${problem.why}`);
    }
  }
  if (inPlace) {
    for (const f of files) {
      const verdict = checkWriteTarget(f, inv.cwd, worktree);
      if (verdict.ok) continue;
      if (verdict.kind === 'dynamic' || verdict.kind === 'unsure') unsure(`\`sed -i\`: ${verdict.detail}`);
      else return deny(verdict.kind === 'metadata' ? 'git_metadata_write' : 'outside_worktree', `\`sed -i\`: ${verdict.detail}`);
    }
  }
  return undefined;
}

/**
 * Reads a sed script far enough to find the GNU `e` command, the `s///e` flag, and file writes (`w`, `W`,
 * `s///w`). Returns a problem, or undefined. A script it cannot read is a problem too.
 */
function sedScriptProblem(
  script: string,
  writeProblem: (path: string) => string | undefined,
): { reason: 'inline_interpreter' | 'outside_worktree'; why: string } | undefined {
  const s = script;
  let i = 0;
  const unreadable = { reason: 'inline_interpreter' as const, why: 'the script uses syntax the guard cannot read' };
  const skipSpace = () => {
    while (i < s.length && (s[i] === ' ' || s[i] === '\t')) i++;
  };
  const toEol = () => {
    const start = i;
    while (i < s.length && s[i] !== '\n') i++;
    return s.slice(start, i);
  };
  const delimited = (d: string) => {
    while (i < s.length && s[i] !== d) {
      if (s[i] === '\\') i++;
      if (s[i] === '\n' && d !== '\n') return false;
      i++;
    }
    if (i >= s.length) return false;
    i++;
    return true;
  };
  const address = () => {
    if (s[i] === '$') i++;
    else if (/[0-9]/.test(s[i] ?? '')) {
      while (/[0-9~]/.test(s[i] ?? '')) i++;
    } else if (s[i] === '/' || s[i] === '\\') {
      let d = '/';
      if (s[i] === '\\') {
        i++;
        d = s[i];
      }
      i++;
      if (!delimited(d)) return false;
      while (/[IM]/.test(s[i] ?? '')) i++;
    } else return true;
    return true;
  };
  while (i < s.length) {
    while (i < s.length && /[\s;]/.test(s[i])) i++;
    if (i >= s.length) break;
    if (s[i] === '#') {
      toEol();
      continue;
    }
    if (!address()) return unreadable;
    skipSpace();
    if (s[i] === ',') {
      i++;
      skipSpace();
      if (s[i] === '+' || s[i] === '~') i++;
      if (!address()) return unreadable;
      skipSpace();
    }
    while (s[i] === '!') {
      i++;
      skipSpace();
    }
    const cmd = s[i++];
    switch (cmd) {
      case '{':
      case '}':
      case '=':
      case 'd':
      case 'D':
      case 'F':
      case 'g':
      case 'G':
      case 'h':
      case 'H':
      case 'n':
      case 'N':
      case 'p':
      case 'P':
      case 'x':
      case 'z':
        break;
      case 'a':
      case 'i':
      case 'c':
        toEol();
        break;
      case ':':
      case 'b':
      case 't':
      case 'T':
        while (i < s.length && s[i] !== '\n' && s[i] !== ';') i++;
        break;
      case 'q':
      case 'Q':
      case 'l':
      case 'L':
        skipSpace();
        while (/[0-9]/.test(s[i] ?? '')) i++;
        break;
      case 'r':
      case 'R':
        toEol();
        break;
      case 'w':
      case 'W': {
        skipSpace();
        const target = toEol().trim();
        const bad = target.startsWith('/dev/') ? undefined : writeProblem(target);
        if (bad) return { reason: 'outside_worktree', why: `\`${cmd} ${target}\` writes ${bad}` };
        break;
      }
      case 'e':
        return { reason: 'inline_interpreter', why: 'the `e` command runs a shell command' };
      case 's': {
        const d = s[i++];
        if (!d || d === '\n' || d === '\\') return unreadable;
        if (!delimited(d) || !delimited(d)) return unreadable;
        while (i < s.length && /[gpiImMe0-9w]/.test(s[i])) {
          if (s[i] === 'e') return { reason: 'inline_interpreter', why: 'the `s///e` flag runs the pattern space as a command' };
          if (s[i] === 'w') {
            i++;
            skipSpace();
            const target = toEol().trim();
            const bad = target.startsWith('/dev/') ? undefined : writeProblem(target);
            if (bad) return { reason: 'outside_worktree', why: `\`s///w ${target}\` writes ${bad}` };
            break;
          }
          i++;
        }
        break;
      }
      case 'y': {
        const d = s[i++];
        if (!d || !delimited(d) || !delimited(d)) return unreadable;
        break;
      }
      default:
        return unreadable;
    }
  }
  return undefined;
}

/** Editors that run their own command language from arguments (vim, emacs) or stdin (ed, ex). */
export const EDITORS = new Set(['vim', 'nvim', 'vi', 'view', 'ex', 'gvim', 'vimdiff', 'emacs', 'emacsclient', 'ed', 'red']);

/** Editor commands that run programs or other languages: `!`, `system()`, `:terminal`, `:py …`, `:source` … */
const EDITOR_EXEC =
  /!|\bsystem\s*\(|\b(sh|shell|term|terminal|py|python3?|pyx|lua|luafile|perl|ruby|tcl|mz|so|source|runtime|exe|execute|call|make|grep|cscope|redir)\b|\(shell-command|\(call-process|\(start-process|\(load/;

export function decideEditor(inv: Invocation, name: string, unsure: Unsure): Refusal | undefined {
  const deny = (why: string) => refusal('inline_interpreter', inv.text, why);
  const argv = inv.argv;
  if (name === 'ed' || name === 'red' || (name === 'ex' && inv.stdin.kind !== 'inherited')) {
    if (inv.stdin.kind === 'literal') {
      // ed reads commands from stdin: `!cmd`, `r !cmd`, `w !cmd`, `e !cmd` run a shell command.
      if (/(^|\n)[^\n!]*!/.test(inv.stdin.text)) return deny(`\`${name}\` gets a \`!\` command on stdin, which runs a shell command`);
      for (const m of inv.stdin.text.matchAll(/(^|\n)\s*[0-9,.$]*\s*[wW]\s+(\S+)/g)) unsure(`\`${name}\` writes \`${m[2]}\` (checked by the sandbox)`);
      return undefined;
    }
    if (inv.stdin.kind !== 'inherited') unsure(`\`${name}\` reads its commands from stdin (${inv.stdin.kind}), which the guard cannot see`);
    return undefined;
  }
  for (let k = 1; k < argv.length; k++) {
    const v = argv[k].value ?? argv[k].prefix;
    const takesCode = ['-c', '--cmd', '--eval', '-eval', '--exec', '-S', '-s', '-l', '--load', '-f', '--funcall', '-u', '-x'].includes(v);
    const attached = v.startsWith('+') || v.startsWith('--eval=');
    if (!takesCode && !attached) continue;
    const code = attached ? (v.startsWith('+') ? v.slice(1) : v.slice(7)) : argv[k + 1]?.value;
    if (code === undefined || ['-S', '-s', '-l', '--load', '-f', '--funcall', '-u', '-x'].includes(v)) {
      unsure(`\`${name} ${v}\` runs editor commands the guard cannot read`);
      continue;
    }
    const exec = EDITOR_EXEC.exec(code);
    if (exec) return deny(`\`${name} ${v} ${code}\` runs a program or another language (\`${exec[0]}\`) from the command line`);
    unsure(`\`${name} ${v} ${code}\` runs editor commands (startup files and plugins load too)`);
  }
  return undefined;
}
