import type { Word } from './words';

/**
 * Option grammars for git subcommands (parse-options: options and operands interleave, long options accept
 * any unique prefix, `--no-` negates) and for GNU-style wrappers (getopt_long with `+`: options stop at the
 * first operand, long options also accept unique prefixes).
 */

export interface OptSpec {
  /** Identifier the caller switches on. */
  readonly key: string;
  /** Long names, without the leading `--`. */
  readonly long?: readonly string[];
  /** Short option characters that mean the same. */
  readonly short?: string;
  /**
   * none: a flag. required: `--x=v`, `--x v`, `-xv`, `-x v`. optional: only attached (`--x=v`, `-xv`).
   * lastarg: takes the next word when there is one (git's PARSE_OPT_LASTARG_DEFAULT).
   */
  readonly arg?: 'none' | 'required' | 'optional' | 'lastarg';
  /** Any abbreviation that could mean this option is treated as this option, even if ambiguous. */
  readonly danger?: boolean;
}

export interface ParsedOpt {
  readonly key: string;
  readonly negated: boolean;
  readonly value?: Word;
  readonly token: Word;
}

export interface Parsed {
  readonly opts: readonly ParsedOpt[];
  /** Operands before `--` (in order). */
  readonly positionals: readonly Word[];
  /** Operands after `--`. */
  readonly afterDashDash: readonly Word[];
  readonly dashDash: boolean;
}

type ParseProblem = 'unknown' | 'ambiguous' | 'dynamic' | 'missing_value';
export type ParseResult = { readonly ok: true; readonly parsed: Parsed } | { readonly ok: false; readonly problem: ParseProblem; readonly token: Word };

export interface ParseMode {
  /** getopt with `+`: the first operand ends option parsing (wrappers). Default: git interleaving. */
  readonly stopAtOperand?: boolean;
  /** `--no-<name>` negates (git). */
  readonly negation?: boolean;
}

export function has(parsed: Parsed, key: string, negated = false): boolean {
  return parsed.opts.some((o) => o.key === key && o.negated === negated);
}

export function optValues(parsed: Parsed, key: string): Word[] {
  return parsed.opts.filter((o) => o.key === key && !o.negated && o.value).map((o) => o.value as Word);
}

type LongMatch = { spec: OptSpec; negated: boolean } | { problem: 'unknown' | 'ambiguous' };

export function matchLong(name: string, specs: readonly OptSpec[], negation: boolean): LongMatch {
  const candidates: { spec: OptSpec; negated: boolean; exact: boolean }[] = [];
  for (const spec of specs) {
    for (const long of spec.long ?? []) {
      if (long === name) candidates.push({ spec, negated: false, exact: true });
      else if (long.startsWith(name)) candidates.push({ spec, negated: false, exact: false });
      if (negation && !long.startsWith('no-')) {
        const neg = `no-${long}`;
        if (neg === name) candidates.push({ spec, negated: true, exact: true });
        else if (neg.startsWith(name) && name.length > 3) candidates.push({ spec, negated: true, exact: false });
      }
    }
  }
  // `--no-merged` names the option `no-merged` itself before it negates `merged` (git checks exact names first).
  const exact = candidates.find((c) => c.exact && !c.negated) ?? candidates.find((c) => c.exact);
  if (exact) return { spec: exact.spec, negated: exact.negated };
  const dangerous = candidates.find((c) => c.spec.danger && !c.negated);
  if (dangerous) return { spec: dangerous.spec, negated: false };
  const distinct = new Set(candidates.map((c) => `${c.spec.key}/${c.negated}`));
  if (distinct.size === 1) return { spec: candidates[0].spec, negated: candidates[0].negated };
  return { problem: distinct.size === 0 ? 'unknown' : 'ambiguous' };
}

export function parseOptions(args: readonly Word[], specs: readonly OptSpec[], mode: ParseMode = {}): ParseResult {
  const opts: ParsedOpt[] = [];
  const positionals: Word[] = [];
  const afterDashDash: Word[] = [];
  let dashDash = false;
  let endOfOptions = false;
  const negation = mode.negation ?? !mode.stopAtOperand;
  const fail = (problem: ParseProblem, token: Word): ParseResult => ({ ok: false, problem, token });

  for (let i = 0; i < args.length; i++) {
    const token = args[i];
    if (dashDash) {
      afterDashDash.push(token);
      continue;
    }
    const text = token.value;
    if (text === undefined) {
      // A computed word: an operand only if its static start shows it cannot be an option.
      const prefix = token.prefix;
      if (endOfOptions || (prefix.length > 0 && !prefix.startsWith('-') && !token.splits)) {
        positionals.push(token);
        if (mode.stopAtOperand) endOfOptions = true;
        continue;
      }
      if (prefix.startsWith('--') && prefix.includes('=') && !token.splits) {
        const m = matchLong(prefix.slice(2, prefix.indexOf('=')), specs, negation);
        if ('problem' in m) return fail(m.problem, token);
        if ((m.spec.arg ?? 'none') === 'none') return fail('unknown', token);
        opts.push({ key: m.spec.key, negated: m.negated, value: token, token });
        continue;
      }
      if (/^-[^-]/.test(prefix) && !token.splits) {
        const spec = specs.find((s) => s.short?.includes(prefix[1]));
        if (spec && (spec.arg === 'required' || spec.arg === 'optional') && prefix.length === 2) {
          opts.push({ key: spec.key, negated: false, value: token, token });
          continue;
        }
      }
      return fail('dynamic', token);
    }
    if (endOfOptions || text === '-' || !text.startsWith('-')) {
      positionals.push(token);
      if (mode.stopAtOperand) endOfOptions = true;
      continue;
    }
    if (text === '--') {
      if (mode.stopAtOperand) {
        endOfOptions = true;
        continue;
      }
      dashDash = true;
      continue;
    }
    if (text === '--end-of-options' && !mode.stopAtOperand) {
      endOfOptions = true;
      continue;
    }
    if (text.startsWith('--')) {
      const eq = text.indexOf('=');
      const name = eq < 0 ? text.slice(2) : text.slice(2, eq);
      const m = matchLong(name, specs, negation);
      if ('problem' in m) return fail(m.problem, token);
      const arg = m.spec.arg ?? 'none';
      if (eq >= 0) {
        if (arg === 'none' || m.negated) return fail('unknown', token);
        opts.push({ key: m.spec.key, negated: false, value: { ...token, value: text.slice(eq + 1), prefix: text.slice(eq + 1) }, token });
        continue;
      }
      if ((arg === 'required' || (arg === 'lastarg' && i + 1 < args.length)) && !m.negated) {
        if (i + 1 >= args.length) return fail('missing_value', token);
        const value = args[++i];
        if (value.value === undefined && value.splits) return fail('dynamic', value);
        opts.push({ key: m.spec.key, negated: false, value, token });
        continue;
      }
      opts.push({ key: m.spec.key, negated: m.negated, token });
      continue;
    }
    // A cluster of short options: `-fd`, `-bname`, `-n5`.
    for (let j = 1; j < text.length; j++) {
      const spec = specs.find((s) => s.short?.includes(text[j]));
      if (!spec) return fail('unknown', token);
      const arg = spec.arg ?? 'none';
      if (arg === 'none') {
        opts.push({ key: spec.key, negated: false, token });
        continue;
      }
      const rest = text.slice(j + 1);
      if (rest) {
        opts.push({ key: spec.key, negated: false, value: { ...token, value: rest, prefix: rest, text: rest }, token });
        break;
      }
      if (arg === 'required' || (arg === 'lastarg' && i + 1 < args.length)) {
        if (i + 1 >= args.length) return fail('missing_value', token);
        const value = args[++i];
        if (value.value === undefined && value.splits) return fail('dynamic', value);
        opts.push({ key: spec.key, negated: false, value, token });
        break;
      }
      opts.push({ key: spec.key, negated: false, token });
    }
  }
  return { ok: true, parsed: { opts, positionals, afterDashDash, dashDash } };
}
