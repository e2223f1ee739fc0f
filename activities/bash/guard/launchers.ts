import type { Invocation } from './invocation';
import { checkWriteTarget } from './paths';
import { refusal, type Refusal } from './reasons';
import { exactValue, type Word } from './words';

/**
 * Programs that take code as text: shells (`-c` strings are parsed again, recursively), interpreters (inline
 * code is checked by a heuristic), awk and sed (their process-spawning commands are detected).
 */

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
      if (argv[k].prefix === '' && argv[k].dynamic !== 'process_substitution') return deny('dynamic_argument', `\`${argv[k].text}\` for \`${name}\` is computed at run time`);
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
      if (['--login', '--noprofile', '--norc', '--posix', '--restricted', '--verbose', '--noediting', '--version', '--help', '--dump-strings', '--dump-po-strings', '--wordexp'].includes(v)) continue;
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
        if (opt === 'keyword' && v.startsWith('-')) return deny('parser_blind_spot', '`-o keyword` turns later `NAME=value` arguments into environment assignments');
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

// Inline code: any mention of git, or of a way to start a process, is refused. A heuristic, stated as such:
// obfuscated code can evade it, as can code in files (which the guard does not read at all).
const SPAWN =
  /\bgit\b|child_process|subprocess|\bos\s*\.\s*(system|exec|spawn|popen|fork|posix_spawn)|\bpopen|\bspawn|\bexec[lv]?p?e?\s*\(|\bexec\b|execSync|execFile|\bsystem\s*\(|\bsystem\b|`|%x|\bqx\b|IO\.popen|Open3|\bpty\b|\bfork\b|\beval\b|__import__|importlib|getattr|ctypes|process\.binding|Deno\s*\.\s*(run|Command)|Bun\s*\.\s*spawn|shell_exec|passthru|proc_open|pcntl_exec|do shell script|os\.execute|io\.popen|Runtime\s*\.\s*getRuntime|ProcessBuilder|Start-Process|Invoke-Expression|\biex\b|new\s+Function|\bFunction\s*\(|(require|import)\s*\(\s*(?!(?<q>['"])[^'"]*\k<q>\s*\))|open\s*\(?[^)]*\|/i;

export function inlineCodeProblem(code: string): string | undefined {
  const m = SPAWN.exec(code);
  return m ? `the inline code mentions \`${m[0]}\`, which can run git or another program` : undefined;
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
  node: { code: 'ep', codeLong: ['--eval', '--print'], valued: ['-r', '--require', '--import', '--loader', '--experimental-loader', '--input-type', '-C', '--conditions', '--env-file', '--title'] },
  bun: { code: 'ep', codeLong: ['--eval', '--print'], valued: ['-r', '--preload', '--cwd', '--env-file'] },
  perl: { code: 'eE', valued: ['-I', '-M', '-m', '-x', '-d', '-D', '-C'] },
  ruby: { code: 'e', valued: ['-I', '-r', '-C', '-E', '-F', '-T', '-x'] },
  php: { code: 'rBRE', valued: ['-c', '-d', '-z', '-t', '-F'], module: ['-f'] },
  lua: { code: 'e', valued: ['-l'] },
  Rscript: { code: 'e', valued: [] },
  R: { code: 'e', valued: [] },
  osascript: { code: 'e', valued: ['-l', '-s'] },
  pwsh: { code: 'c', codeLong: ['-Command', '-command', '-c'], valued: ['-WorkingDirectory', '-wd', '-ExecutionPolicy', '-ep'], module: ['-File', '-f'], refused: ['-EncodedCommand', '-enc', '-ec', '-e'] },
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

/** Inline code, a script file, or stdin: refuse code that can spawn, and code we cannot see. */
export function decideInterpreter(inv: Invocation, name: string, grammar: InterpreterGrammar): Refusal | undefined {
  const deny = (reason: Parameters<typeof refusal>[0], why: string) => refusal(reason, inv.text, why);
  const argv = inv.argv;
  if (name === 'deno') {
    if (argv[1]?.value === 'eval') return codeVerdict(inv, argv[2], name);
    return undefined; // `deno run file` and friends: a file the guard does not read
  }
  let sawCode = false;
  for (let k = 1; k < argv.length; k++) {
    const w = argv[k];
    const v = w.value;
    if (v === undefined) {
      if (sawCode) return undefined;
      return deny('dynamic_argument', `\`${w.text}\` for \`${name}\` is computed at run time and may be code`);
    }
    if (v === '--') break;
    if (v === '-') return stdinVerdict(inv, name);
    if (grammar.refused?.some((r) => v === r || v.startsWith(`${r}:`))) return deny('inline_interpreter', `\`${name} ${v}\` runs encoded code`);
    const long = grammar.codeLong?.find((o) => v === o || v.startsWith(`${o}=`));
    if (long) {
      const code = v.includes('=') ? { ...w, value: v.slice(v.indexOf('=') + 1) } : argv[++k];
      const bad = codeVerdict(inv, code, name);
      if (bad) return bad;
      sawCode = true;
      continue;
    }
    if (grammar.module?.includes(v)) return undefined;
    if (grammar.valued?.includes(v)) {
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
        const bad = codeVerdict(inv, code, name);
        if (bad) return bad;
        sawCode = true;
        continue;
      }
      if (grammar.module?.some((m) => body.includes(m.slice(1)))) return undefined;
      continue;
    }
    if (v.startsWith('-')) continue;
    // The first operand: a script file (after inline code, it is an argument to the code).
    return undefined;
  }
  if (sawCode) return undefined;
  return stdinVerdict(inv, name);
}

function codeVerdict(inv: Invocation, code: Word | undefined, name: string): Refusal | undefined {
  if (!code) return undefined;
  const text = exactValue(code);
  if (text === undefined) return refusal('inline_interpreter', inv.text, `the inline code for \`${name}\` is computed at run time`);
  const problem = inlineCodeProblem(text);
  return problem ? refusal('inline_interpreter', inv.text, `\`${name}\`: ${problem}`) : undefined;
}

/** Code from stdin: the tool's own stdin is empty (/dev/null); anything fed into it must be visible and clean. */
function stdinVerdict(inv: Invocation, name: string): Refusal | undefined {
  if (inv.stdin.kind === 'inherited') return undefined;
  if (inv.stdin.kind === 'literal') {
    const problem = inlineCodeProblem(inv.stdin.text);
    return problem ? refusal('inline_interpreter', inv.text, `\`${name}\` reads code from a heredoc or here-string: ${problem}`) : undefined;
  }
  return refusal('inline_interpreter', inv.text, `\`${name}\` reads its code from stdin, which the guard cannot see`);
}

// awk: system(), getline from a command and output pipes run programs; gawk can load extensions.
const AWK_SPAWN = /\bsystem\b|getline|\|&|(^|[^|])\|(?!\|)|\bgit\b|@load|extension\s*\(/;

export function decideAwk(inv: Invocation, name: string): Refusal | undefined {
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
      return deny('inline_interpreter', `\`${name} ${v}\` loads an extension or program the guard cannot see`);
    }
    if (v === '-f' || v === '--file' || v === '-i' || v === '--include') {
      fromFile = true;
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
    if (text === undefined) return deny('inline_interpreter', `the \`${name}\` program is computed at run time`);
    const m = AWK_SPAWN.exec(text);
    if (m) return deny('inline_interpreter', `the \`${name}\` program uses \`${m[0].trim() || '|'}\`, which can run git or another program`);
  }
  return undefined;
}

export function decideSed(inv: Invocation, worktree: string): Refusal | undefined {
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
      if (!verdict.ok) return deny(verdict.kind === 'metadata' ? 'git_metadata_write' : verdict.kind === 'dynamic' ? 'dynamic_argument' : 'outside_worktree', `\`sed -i\`: ${verdict.detail}`);
    }
  }
  return undefined;
}

/**
 * Reads a sed script far enough to find the GNU `e` command, the `s///e` flag, and file writes (`w`, `W`,
 * `s///w`). Returns a problem, or undefined. A script it cannot read is a problem too.
 */
export function sedScriptProblem(script: string, writeProblem: (path: string) => string | undefined): { reason: 'inline_interpreter' | 'outside_worktree'; why: string } | undefined {
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
      case 'd': case 'D': case 'F': case 'g': case 'G': case 'h': case 'H': case 'n': case 'N': case 'p': case 'P': case 'x': case 'z':
        break;
      case 'a': case 'i': case 'c':
        toEol();
        break;
      case ':': case 'b': case 't': case 'T':
        while (i < s.length && s[i] !== '\n' && s[i] !== ';') i++;
        break;
      case 'q': case 'Q': case 'l': case 'L':
        skipSpace();
        while (/[0-9]/.test(s[i] ?? '')) i++;
        break;
      case 'r': case 'R':
        toEol();
        break;
      case 'w': case 'W': {
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

/** Editors that run their own command language from arguments. */
export const EDITORS = new Set(['vim', 'nvim', 'vi', 'view', 'ex', 'gvim', 'vimdiff', 'emacs', 'emacsclient']);

export function decideEditor(inv: Invocation, name: string): Refusal | undefined {
  const argv = inv.argv;
  for (let k = 1; k < argv.length; k++) {
    const v = argv[k].value ?? argv[k].prefix;
    const takesCode = ['-c', '--cmd', '--eval', '-eval', '--exec', '-S', '-s', '-l', '--load', '-f', '--funcall'].includes(v);
    const attached = v.startsWith('+') || v.startsWith('--eval=');
    if (!takesCode && !attached) continue;
    return refusal('inline_interpreter', inv.text, `\`${name} ${v}\` runs editor commands (which can run programs) from the command line`);
  }
  return undefined;
}
