import { splitAssignmentWord } from './env';
import type { GuardScope, Invocation } from './invocation';
import { matchLong, parseOptions, type OptSpec, type ParsedOpt } from './options';
import { checkWriteTarget, cwdInside, resolvePath, type Cwd } from './paths';
import { refusal, type Refusal } from './reasons';
import { dynamicWord, exactValue, literalWord, splitEnvString, type Word } from './words';

/**
 * Programs that run another program from their arguments: each is peeled with its own option grammar, so the
 * inner command is analysed like any other. `find -exec` and `xargs` also feed the inner command words that
 * are only known at run time.
 */

export type Unwrapped =
  | { readonly kind: 'run'; readonly invocations: readonly Invocation[]; readonly shellString?: { readonly source: string; readonly cwd: Cwd } }
  | { readonly kind: 'nothing' }
  | { readonly kind: 'refuse'; readonly refusal: Refusal };

type Handler = (inv: Invocation, scope: GuardScope) => Unwrapped;

const refuse = (inv: Invocation, reason: Parameters<typeof refusal>[0], why: string): Unwrapped => ({
  kind: 'refuse',
  refusal: refusal(reason, inv.text, why),
});

const run = (inv: Invocation, argv: readonly Word[], extra: Partial<Invocation> = {}): Unwrapped =>
  argv.length === 0 ? { kind: 'nothing' } : { kind: 'run', invocations: [{ ...inv, ...extra, argv }] };

const nameOf = (inv: Invocation) => inv.argv[0]?.value ?? '';

/** A getopt_long('+…') wrapper: options, then `operands` fixed operands, then the command. */
function gnu(
  specs: readonly OptSpec[],
  operands = 0,
  after?: (inv: Invocation, opts: readonly ParsedOpt[], scope: GuardScope) => Unwrapped | Partial<Invocation> | undefined,
): Handler {
  return (inv, scope) => {
    const result = parseOptions(inv.argv.slice(1), specs, { stopAtOperand: true });
    if (!result.ok) {
      if (result.problem === 'dynamic')
        return refuse(
          inv,
          'dynamic_argument',
          `\`${result.token.text}\` for \`${nameOf(inv)}\` is computed at run time; the guard cannot tell where the inner command starts`,
        );
      return refuse(inv, 'unresolved_launcher', `\`${result.token.text}\` is not a \`${nameOf(inv)}\` option the guard models`);
    }
    const { opts, positionals } = result.parsed;
    let extra: Partial<Invocation> = {};
    if (after) {
      const out = after(inv, opts, scope);
      if (out && 'kind' in out) return out as Unwrapped;
      if (out) extra = out as Partial<Invocation>;
    }
    if (positionals.length < operands) return { kind: 'nothing' };
    for (const w of positionals.slice(0, operands)) {
      if (w.value === undefined && w.splits)
        return refuse(inv, 'dynamic_argument', `\`${w.text}\` may expand to several words; the guard cannot tell where the inner command starts`);
    }
    return run(inv, positionals.slice(operands), extra);
  };
}

const chdir = (inv: Invocation, dir: Word | undefined, scope: GuardScope): Partial<Invocation> => {
  if (!dir) return {};
  const v = exactValue(dir);
  if (v === undefined) return { cwd: { kind: 'unknown', why: `directory \`${dir.text}\` computed at run time` } };
  return { cwd: resolvePath(inv.cwd, v, scope.worktree) };
};

const ENV_SPECS: OptSpec[] = [
  { key: 'ignore', short: 'i', long: ['ignore-environment'] },
  { key: 'null', short: '0', long: ['null'] },
  { key: 'debug', short: 'v', long: ['debug'] },
  { key: 'unset', short: 'u', long: ['unset'], arg: 'required' },
  { key: 'chdir', short: 'C', long: ['chdir'], arg: 'required' },
  { key: 'split', short: 'S', long: ['split-string'], arg: 'required' },
  { key: 'argv0', short: 'a', long: ['argv0'], arg: 'required' },
  { key: 'signal', long: ['block-signal', 'default-signal', 'ignore-signal'], arg: 'optional' },
  { key: 'list-signals', long: ['list-signal-handling'] },
  { key: 'info', long: ['help', 'version'] },
];

/** `env [-i] [-u N] [-C dir] [-S 'string'] [NAME=value]… [command]`; `-S` splits its string into more arguments. */
const env: Handler = (inv, scope) => {
  let args = inv.argv.slice(1);
  let extra: Partial<Invocation> = {};
  const assignments = [...inv.assignments];
  let k = 0;
  let splits = 0;
  while (k < args.length) {
    const w = args[k];
    const v = w.value;
    if (v === undefined) {
      if (splitAssignmentWord(w)) break;
      return refuse(inv, 'dynamic_argument', `\`${w.text}\` for \`env\` is computed at run time; the guard cannot tell where the command starts`);
    }
    if (v === '-') {
      k++;
      continue;
    }
    if (v === '--') {
      k++;
      break;
    }
    if (!v.startsWith('-')) break;
    let spec: OptSpec | undefined;
    let value: string | undefined;
    let consumed = 1;
    if (v.startsWith('--')) {
      const eq = v.indexOf('=');
      const m = matchLong(eq < 0 ? v.slice(2) : v.slice(2, eq), ENV_SPECS, false);
      if ('problem' in m) return refuse(inv, 'unresolved_launcher', `\`${v}\` is not an \`env\` option the guard models`);
      spec = m.spec;
      if (spec.arg === 'required') {
        if (eq >= 0) value = v.slice(eq + 1);
        else {
          const next = args[k + 1];
          if (!next) return { kind: 'nothing' };
          value = exactValue(next);
          if (value === undefined) return refuse(inv, 'dynamic_argument', `the value of \`${v}\` (\`${next.text}\`) is computed at run time`);
          consumed = 2;
        }
      }
    } else {
      // Short cluster: flags until one that takes a value.
      let j = 1;
      for (; j < v.length; j++) {
        const s = ENV_SPECS.find((o) => o.short === v[j]);
        if (!s) return refuse(inv, 'unresolved_launcher', `\`-${v[j]}\` is not an \`env\` option the guard models`);
        if (s.arg === 'required') {
          spec = s;
          if (j + 1 < v.length) value = v.slice(j + 1);
          else {
            const next = args[k + 1];
            if (!next) return { kind: 'nothing' };
            value = exactValue(next);
            if (value === undefined) return refuse(inv, 'dynamic_argument', `the value of \`-${v[j]}\` (\`${next.text}\`) is computed at run time`);
            consumed = 2;
          }
          break;
        }
      }
    }
    if (spec?.key === 'split') {
      const words = splitEnvString(value ?? '');
      if (!words || ++splits > 4) return refuse(inv, 'dynamic_argument', `\`env -S ${value}\` uses expansions or escapes the guard does not model`);
      args = [...args.slice(0, k), ...words.map((x) => literalWord(x, `env -S word ${x}`)), ...args.slice(k + consumed)];
      continue;
    }
    if (spec?.key === 'chdir') extra = chdir({ ...inv, ...extra } as Invocation, literalWord(value ?? ''), scope);
    k += consumed;
  }
  for (; k < args.length; k++) {
    const a = splitAssignmentWord(args[k]);
    if (!a) break;
    assignments.push(a);
  }
  const rest = args.slice(k);
  if (rest.length > 0 && rest[0].value === undefined && rest[0].prefix === '') {
    return refuse(inv, 'dynamic_command', `the command after \`env\` (\`${rest[0].text}\`) is computed at run time`);
  }
  return run(inv, rest, { ...extra, assignments });
};

const command: Handler = (inv) => {
  const args = inv.argv.slice(1);
  let k = 0;
  for (; k < args.length; k++) {
    const v = args[k].value;
    if (v === undefined) return refuse(inv, 'dynamic_argument', `\`${args[k].text}\` for \`command\` is computed at run time`);
    if (v === '--') {
      k++;
      break;
    }
    if (!/^-[pvV]+$/.test(v)) break;
    if (/[vV]/.test(v)) return { kind: 'nothing' }; // describes the command, does not run it
  }
  return run(inv, args.slice(k));
};

const builtin: Handler = (inv) => run(inv, inv.argv.slice(1));
const coproc: Handler = (inv) => run(inv, inv.argv.slice(1));

const exec = gnu([
  { key: 'clear', short: 'c' },
  { key: 'login', short: 'l' },
  { key: 'name', short: 'a', arg: 'required' },
]);

const time = gnu(
  [
    { key: 'posix', short: 'p', long: ['portability'] },
    { key: 'verbose', short: 'v', long: ['verbose'] },
    { key: 'quiet', short: 'q', long: ['quiet'] },
    { key: 'append', short: 'a', long: ['append'] },
    { key: 'output', short: 'o', long: ['output'], arg: 'required' },
    { key: 'format', short: 'f', long: ['format'], arg: 'required' },
    { key: 'info', long: ['help', 'version'] },
  ],
  0,
  (inv, opts, scope) => {
    for (const o of opts) {
      if (o.key !== 'output' || !o.value) continue;
      const verdict = checkWriteTarget(o.value, inv.cwd, scope.worktree);
      if (!verdict.ok)
        return refuse(
          inv,
          verdict.kind === 'metadata' ? 'git_metadata_write' : verdict.kind === 'dynamic' ? 'dynamic_argument' : 'outside_worktree',
          `\`time -o\`: ${verdict.detail}`,
        );
    }
    return undefined;
  },
);

const niceSpecs: OptSpec[] = [
  { key: 'adjustment', short: 'n', long: ['adjustment'], arg: 'required' },
  { key: 'info', long: ['help', 'version'] },
];
const nice: Handler = (inv, scope) => {
  // `nice -5 cmd` / `nice --10 cmd`: a numeric option of its own.
  const first = inv.argv[1]?.value;
  if (first !== undefined && /^--?\d+$/.test(first)) return gnu(niceSpecs)({ ...inv, argv: [inv.argv[0], ...inv.argv.slice(2)] }, scope);
  return gnu(niceSpecs)(inv, scope);
};

const nohup = gnu([{ key: 'info', long: ['help', 'version'] }]);

const timeout = gnu(
  [
    { key: 'foreground', long: ['foreground'] },
    { key: 'preserve', long: ['preserve-status'] },
    { key: 'verbose', short: 'v', long: ['verbose'] },
    { key: 'kill-after', short: 'k', long: ['kill-after'], arg: 'required' },
    { key: 'signal', short: 's', long: ['signal'], arg: 'required' },
    { key: 'info', long: ['help', 'version'] },
  ],
  1,
);

const stdbuf = gnu([
  { key: 'input', short: 'i', long: ['input'], arg: 'required' },
  { key: 'output', short: 'o', long: ['output'], arg: 'required' },
  { key: 'error', short: 'e', long: ['error'], arg: 'required' },
  { key: 'info', long: ['help', 'version'] },
]);

const setsid = gnu([
  { key: 'ctty', short: 'c', long: ['ctty'] },
  { key: 'fork', short: 'f', long: ['fork'] },
  { key: 'wait', short: 'w', long: ['wait'] },
  { key: 'info', short: 'hV', long: ['help', 'version'] },
]);

const ionice = gnu(
  [
    { key: 'class', short: 'c', long: ['class'], arg: 'required' },
    { key: 'classdata', short: 'n', long: ['classdata'], arg: 'required' },
    { key: 'pid', short: 'pPu', long: ['pid', 'pgid', 'uid'], arg: 'required' },
    { key: 'ignore', short: 't', long: ['ignore'] },
    { key: 'info', short: 'hV', long: ['help', 'version'] },
  ],
  0,
  (inv, opts) => (opts.some((o) => o.key === 'pid') ? { kind: 'nothing' } : undefined),
);

const chronic = gnu([{ key: 'flags', short: 'ev' }]);
const unbuffer = gnu([{ key: 'flags', short: 'p' }]);

const FLOCK: OptSpec[] = [
  { key: 'flags', short: 'sexnuoF', long: ['shared', 'exclusive', 'nonblock', 'nb', 'unlock', 'close', 'no-fork', 'verbose'] },
  { key: 'timeout', short: 'wE', long: ['timeout', 'wait', 'conflict-exit-code'], arg: 'required' },
  { key: 'info', short: 'hV', long: ['help', 'version'] },
];

/** `flock [opts] file cmd…`, `flock [opts] file -c 'string'` (run by sh -c), `flock [opts] fd` (no command). */
const flock: Handler = (inv) => {
  const result = parseOptions(inv.argv.slice(1), FLOCK, { stopAtOperand: true });
  if (!result.ok) {
    return result.problem === 'dynamic'
      ? refuse(inv, 'dynamic_argument', `\`${result.token.text}\` for \`flock\` is computed at run time`)
      : refuse(inv, 'unresolved_launcher', `\`${result.token.text}\` is not a \`flock\` option the guard models`);
  }
  const [, ...rest] = result.parsed.positionals;
  if (rest.length === 0) return { kind: 'nothing' };
  const first = rest[0].value;
  if (first === '-c' || first === '--command') {
    const source = rest[1] ? exactValue(rest[1]) : undefined;
    if (source === undefined) return refuse(inv, 'dynamic_argument', 'the `flock -c` command string is computed at run time');
    return { kind: 'run', invocations: [], shellString: { source, cwd: inv.cwd } };
  }
  return run(inv, rest);
};

const SUDO: OptSpec[] = [
  { key: 'shell', short: 'is', long: ['login', 'shell'], danger: true },
  { key: 'edit', short: 'e', long: ['edit'], danger: true },
  {
    key: 'flags',
    short: 'AbEHKklnPSVv',
    long: [
      'askpass',
      'background',
      'set-home',
      'remove-timestamp',
      'reset-timestamp',
      'list',
      'non-interactive',
      'preserve-groups',
      'stdin',
      'version',
      'validate',
    ],
  },
  { key: 'preserve-env', long: ['preserve-env'], arg: 'optional' },
  { key: 'chdir', short: 'D', long: ['chdir'], arg: 'required' },
  { key: 'chroot', short: 'R', long: ['chroot'], arg: 'required', danger: true },
  {
    key: 'valued',
    short: 'CghprTtUu',
    long: ['close-from', 'group', 'host', 'prompt', 'role', 'command-timeout', 'type', 'other-user', 'user'],
    arg: 'required',
  },
];

const sudo: Handler = (inv, scope) => {
  const result = parseOptions(inv.argv.slice(1), SUDO, { stopAtOperand: true });
  if (!result.ok) {
    return result.problem === 'dynamic'
      ? refuse(inv, 'dynamic_argument', `\`${result.token.text}\` for \`sudo\` is computed at run time`)
      : refuse(inv, 'unresolved_launcher', `\`${result.token.text}\` is not a \`sudo\` option the guard models`);
  }
  const keys = result.parsed.opts.map((o) => o.key);
  if (keys.includes('shell')) return refuse(inv, 'unresolved_launcher', '`sudo -i` / `sudo -s` run their arguments through a shell');
  if (keys.includes('edit') || keys.includes('chroot')) return refuse(inv, 'unresolved_launcher', '`sudo -e` / `sudo -R` are not modelled');
  const dir = result.parsed.opts.find((o) => o.key === 'chdir')?.value;
  const assignments = [...inv.assignments];
  let k = 0;
  const rest = result.parsed.positionals;
  for (; k < rest.length; k++) {
    const a = splitAssignmentWord(rest[k]);
    if (!a) break;
    assignments.push(a);
  }
  return run(inv, rest.slice(k), { ...chdir(inv, dir, scope), assignments });
};

const doas: Handler = (inv) => {
  const result = parseOptions(
    inv.argv.slice(1),
    [
      { key: 'shell', short: 's', danger: true },
      { key: 'flags', short: 'nL' },
      { key: 'valued', short: 'uC', arg: 'required' },
    ],
    { stopAtOperand: true },
  );
  if (!result.ok) return refuse(inv, 'unresolved_launcher', `\`${result.token.text}\` is not a \`doas\` option the guard models`);
  if (result.parsed.opts.some((o) => o.key === 'shell')) return refuse(inv, 'unresolved_launcher', '`doas -s` runs a shell');
  return run(inv, result.parsed.positionals);
};

const busybox: Handler = (inv) => {
  const first = inv.argv[1]?.value;
  if (first === undefined) return inv.argv[1] ? refuse(inv, 'dynamic_command', 'the busybox applet is computed at run time') : { kind: 'nothing' };
  if (first.startsWith('-')) return { kind: 'nothing' };
  return run(inv, inv.argv.slice(1));
};

const XARGS: OptSpec[] = [
  { key: 'flags', short: '0oprtx', long: ['null', 'open-tty', 'interactive', 'no-run-if-empty', 'verbose', 'exit', 'show-limits'] },
  { key: 'valued', short: 'adELnPs', long: ['arg-file', 'delimiter', 'max-args', 'max-procs', 'max-chars', 'process-slot-var'], arg: 'required' },
  { key: 'replace-I', short: 'I', arg: 'required' },
  { key: 'replace', short: 'i', long: ['replace'], arg: 'optional' },
  { key: 'optional', short: 'el', long: ['eof', 'max-lines'], arg: 'optional' },
  { key: 'info', long: ['help', 'version'] },
];

/** `xargs [opts] [cmd [args]]`: the command gets more words from input (or has `{}`-style words replaced). */
const xargs: Handler = (inv) => {
  const result = parseOptions(inv.argv.slice(1), XARGS, { stopAtOperand: true });
  if (!result.ok) {
    return result.problem === 'dynamic'
      ? refuse(inv, 'dynamic_argument', `\`${result.token.text}\` for \`xargs\` is computed at run time`)
      : refuse(inv, 'unresolved_launcher', `\`${result.token.text}\` is not an \`xargs\` option the guard models`);
  }
  let replace: string | undefined;
  for (const o of result.parsed.opts) {
    if (o.key === 'replace-I') {
      replace = o.value ? exactValue(o.value) : undefined;
      if (replace === undefined) return refuse(inv, 'dynamic_argument', 'the `xargs -I` replacement string is computed at run time');
    }
    if (o.key === 'replace') replace = (o.value ? exactValue(o.value) : undefined) ?? '{}';
  }
  const argv = result.parsed.positionals.length > 0 ? result.parsed.positionals : [literalWord('echo')];
  if (replace === undefined) return { kind: 'run', invocations: [{ ...inv, argv, trailingDynamic: true, stdin: { kind: 'dynamic' } }] };
  const marker = replace;
  const replaced = argv.map((w) => {
    const v = w.value;
    if (v === undefined || !v.includes(marker)) return w;
    return dynamicWord('input', w.text, v.slice(0, v.indexOf(marker)));
  });
  return { kind: 'run', invocations: [{ ...inv, argv: replaced, stdin: { kind: 'dynamic' } }] };
};

/** `find [-H|-L|-P] [-D x] [-Ox] [roots…] [expression]` with `-exec/-execdir/-ok/-okdir … ;|+`. */
const find: Handler = (inv, scope) => {
  const args = inv.argv.slice(1);
  let k = 0;
  while (k < args.length) {
    const v = args[k].value;
    if (v === '-H' || v === '-L' || v === '-P' || (v !== undefined && /^-O\d*$/.test(v))) k++;
    else if (v === '-D') k += 2;
    else break;
  }
  const roots: Word[] = [];
  for (; k < args.length; k++) {
    const w = args[k];
    const v = w.value;
    if (v === undefined) {
      if (w.prefix && !w.prefix.startsWith('-') && !w.splits) {
        roots.push(w);
        continue;
      }
      return refuse(inv, 'dynamic_argument', `\`${w.text}\` in \`find\` is computed at run time and may be an action such as -exec or -delete`);
    }
    if (v.startsWith('-') || v === '(' || v === ')' || v === '!' || v === ',') break;
    roots.push(w);
  }
  if (roots.length === 0) roots.push(literalWord('.'));
  const invocations: Invocation[] = [];
  const write = (w: Word, what: string): Unwrapped | undefined => {
    const verdict = checkWriteTarget(w, inv.cwd, scope.worktree);
    if (verdict.ok) return undefined;
    return refuse(
      inv,
      verdict.kind === 'metadata' ? 'git_metadata_write' : verdict.kind === 'dynamic' ? 'dynamic_argument' : 'outside_worktree',
      `\`find ${what}\`: ${verdict.detail}`,
    );
  };
  for (; k < args.length; k++) {
    const w = args[k];
    const v = w.value;
    if (v === undefined) {
      if (w.prefix && !w.prefix.startsWith('-') && !w.splits) continue;
      return refuse(inv, 'dynamic_argument', `\`${w.text}\` in the \`find\` expression is computed at run time and may be an action such as -exec or -delete`);
    }
    if (v === '-delete') {
      for (const r of roots) {
        const bad = write(r, `-delete under ${r.text}`);
        if (bad) return bad;
      }
      continue;
    }
    if (v === '-fprint' || v === '-fprint0' || v === '-fls' || v === '-fprintf') {
      const target = args[k + 1];
      if (target) {
        const bad = write(target, `${v} ${target.text}`);
        if (bad) return bad;
      }
      k += v === '-fprintf' ? 2 : 1;
      continue;
    }
    if (v !== '-exec' && v !== '-execdir' && v !== '-ok' && v !== '-okdir') continue;
    const words: Word[] = [];
    let end = -1;
    let plus = false;
    for (let j = k + 1; j < args.length; j++) {
      const a = args[j];
      if (a.value === undefined) {
        return refuse(inv, 'dynamic_argument', `\`${a.text}\` inside \`find ${v}\` is computed at run time (it could even end the command early)`);
      }
      if (a.value === ';') {
        end = j;
        break;
      }
      if (a.value === '+' && words.length > 0 && words[words.length - 1].value === '{}') {
        end = j;
        plus = true;
        break;
      }
      words.push(a);
    }
    if (end < 0) return refuse(inv, 'parse_error', `\`find ${v}\` has no terminating \`;\` or \`{} +\``);
    const inner = (plus ? words.slice(0, -1) : words).map((a) =>
      a.value !== undefined && a.value.includes('{}') ? dynamicWord('input', a.text, a.value.slice(0, a.value.indexOf('{}'))) : a,
    );
    let cwd: Cwd = inv.cwd;
    if (v === '-execdir' || v === '-okdir') {
      const inside = roots.every((r) => r.value !== undefined && cwdInside(resolvePath(inv.cwd, r.value, scope.worktree), scope.worktree));
      cwd = inside ? { kind: 'inside' } : { kind: 'unknown', why: `\`find ${v}\` runs in the directories it finds` };
    }
    invocations.push({ ...inv, argv: inner, cwd, trailingDynamic: plus, stdin: { kind: 'inherited' } });
    k = end;
  }
  return invocations.length > 0 ? { kind: 'run', invocations } : { kind: 'nothing' };
};

export const WRAPPERS: Readonly<Record<string, Handler>> = {
  env,
  command,
  builtin,
  exec,
  time,
  nice,
  nohup,
  timeout,
  stdbuf,
  setsid,
  ionice,
  flock,
  chronic,
  unbuffer,
  coproc,
  sudo,
  doas,
  busybox,
  toybox: busybox,
  xargs,
  find,
};

export function unwrap(inv: Invocation, name: string, scope: GuardScope): Unwrapped | undefined {
  const handler = WRAPPERS[name];
  return handler ? handler(inv, scope) : undefined;
}
