import type { Node } from 'web-tree-sitter';

/**
 * Word resolution: what bash passes as one argv word after quote removal, when that is knowable from the text.
 * Anything bash computes at run time (expansions, substitutions, brace and tilde expansion, `$"…"` translation)
 * makes the word dynamic; unquoted glob characters are kept in the value and flagged.
 */

export type DynamicKind =
  'expansion' | 'command_substitution' | 'process_substitution' | 'arithmetic' | 'brace' | 'tilde' | 'translated' | 'ansi_c' | 'array' | 'unparsed' | 'input';

export interface Word {
  /** Source text (for messages). */
  readonly text: string;
  /** The value bash passes, when it is static. */
  readonly value?: string;
  /** The static text before the first dynamic part (the whole value when static). */
  readonly prefix: string;
  /** Why the value is not static. */
  readonly dynamic?: DynamicKind;
  /** Unquoted expansion, substitution or brace expansion: may become zero or several words. */
  readonly splits: boolean;
  /** Unquoted `*`, `?` or `[` in a static value: pathname expansion may change it. */
  readonly glob: boolean;
}

export function literalWord(value: string, text = value): Word {
  return { text, value, prefix: value, splits: false, glob: false };
}

export function dynamicWord(kind: DynamicKind, text: string, prefix = '', splits = false): Word {
  return { text, prefix, dynamic: kind, splits, glob: false };
}

/** Static value with no glob characters: safe to compare as a literal. */
export function exactValue(w: Word): string | undefined {
  return w.value !== undefined && !w.glob ? w.value : undefined;
}

type Part =
  | { readonly kind: 'lit'; readonly text: string; readonly quoted: readonly boolean[] }
  | { readonly kind: 'dyn'; readonly why: DynamicKind; readonly quoted: boolean };

// Masks are per UTF-16 unit, like string indexing.
const litUnits = (text: string, quoted: boolean): Part => ({ kind: 'lit', text, quoted: new Array<boolean>(text.length).fill(quoted) });

/** `$` followed by one of these starts an expansion bash performs (outside single quotes). */
const EXPANSION_START = /[A-Za-z0-9_{(\[@*#?$!-]/;

export function resolveWord(node: Node): Word {
  const parts = partsOf(node, false);
  return fromParts(node.text, parts);
}

/** Resolves a variable assignment's value (tilde expansion also applies after `=` and `:`). */
export function resolveAssignmentValue(node: Node | null): Word {
  if (!node) return literalWord('', '');
  return fromParts(node.text, partsOf(node, false), true);
}

function partsOf(node: Node, inDouble: boolean): Part[] {
  switch (node.type) {
    case 'word':
      return unquoteWord(node.text);
    case 'number':
      return [litUnits(node.text, false)];
    case 'raw_string':
      return [litUnits(node.text.slice(1, -1), true)];
    case 'ansi_c_string': {
      const decoded = decodeAnsiC(node.text.slice(2, -1));
      return decoded === undefined ? [{ kind: 'dyn', why: 'ansi_c', quoted: true }] : [litUnits(decoded, true)];
    }
    case 'string': {
      // The parser leaves some of a string's text (newlines, for one) between its children: read the gaps too.
      const out: Part[] = [];
      const text = node.text;
      let at = 0;
      const gap = (end: number) => {
        if (end > at) out.push(...unquoteDouble(text.slice(at, end)));
      };
      for (const child of node.children) {
        if (!child) continue;
        const start = child.startIndex - node.startIndex;
        const end = child.endIndex - node.startIndex;
        if (child.type === '"') {
          if (start > 0) gap(start);
          at = end;
          continue;
        }
        gap(start);
        if (child.type === 'string_content') out.push(...unquoteDouble(child.text));
        else if (child.type === '$') out.push(litUnits('$', true));
        else out.push(...partsOf(child, true));
        at = end;
      }
      return out;
    }
    case 'concatenation': {
      const out: Part[] = [];
      for (const child of node.children) if (child) out.push(...partsOf(child, inDouble));
      return out;
    }
    case 'simple_expansion':
    case 'expansion':
      return [{ kind: 'dyn', why: 'expansion', quoted: inDouble }];
    case 'command_substitution':
      return [{ kind: 'dyn', why: 'command_substitution', quoted: inDouble }];
    case 'process_substitution':
      return [{ kind: 'dyn', why: 'process_substitution', quoted: true }];
    case 'arithmetic_expansion':
      return [{ kind: 'dyn', why: 'arithmetic', quoted: inDouble }];
    case 'brace_expression':
      return [{ kind: 'dyn', why: 'brace', quoted: false }];
    case 'translated_string':
      return [{ kind: 'dyn', why: 'translated', quoted: true }];
    case 'array':
      return [{ kind: 'dyn', why: 'array', quoted: false }];
    default:
      return [{ kind: 'dyn', why: 'unparsed', quoted: inDouble }];
  }
}

/** Unquoted word text: backslash quotes the next character; `\⏎` disappears. */
function unquoteWord(text: string): Part[] {
  let value = '';
  const quoted: boolean[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') {
      if (i + 1 >= text.length) {
        value += '\\';
        quoted.push(true);
        continue;
      }
      const next = text[++i];
      if (next === '\n') continue;
      value += next;
      quoted.push(true);
      continue;
    }
    // The parser should have split these off; if it did not, bash may do something we cannot see.
    if (c === '$' && i + 1 < text.length && EXPANSION_START.test(text[i + 1])) return [{ kind: 'dyn', why: 'unparsed', quoted: false }];
    if (c === '`' || c === '"' || c === "'") return [{ kind: 'dyn', why: 'unparsed', quoted: false }];
    value += c;
    quoted.push(false);
  }
  return [{ kind: 'lit', text: value, quoted }];
}

/** Double-quoted text: backslash escapes only `$`, backtick, `"`, backslash and newline. */
function unquoteDouble(text: string): Part[] {
  let value = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\' && i + 1 < text.length) {
      const next = text[i + 1];
      if (next === '\n') {
        i++;
        continue;
      }
      if (next === '$' || next === '`' || next === '"' || next === '\\') {
        value += next;
        i++;
        continue;
      }
      value += c;
      continue;
    }
    if (c === '$' && i + 1 < text.length && EXPANSION_START.test(text[i + 1])) return [{ kind: 'dyn', why: 'unparsed', quoted: true }];
    if (c === '`') return [{ kind: 'dyn', why: 'unparsed', quoted: true }];
    value += c;
  }
  return [litUnits(value, true)];
}

/** Decodes `$'…'` like bash; undefined (dynamic) when the result would hold a NUL, which bash truncates at. */
function decodeAnsiC(body: string): string | undefined {
  let out = '';
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== '\\' || i + 1 >= body.length) {
      out += c;
      continue;
    }
    const e = body[++i];
    const simple: Record<string, string> = {
      a: '\x07',
      b: '\b',
      e: '\x1b',
      E: '\x1b',
      f: '\f',
      n: '\n',
      r: '\r',
      t: '\t',
      v: '\v',
      '\\': '\\',
      "'": "'",
      '"': '"',
      '?': '?',
    };
    if (e in simple) {
      out += simple[e];
      continue;
    }
    if (/[0-7]/.test(e)) {
      let digits = e;
      while (digits.length < 3 && i + 1 < body.length && /[0-7]/.test(body[i + 1])) digits += body[++i];
      out += String.fromCharCode(parseInt(digits, 8) & 0xff);
      continue;
    }
    const hex = (max: number) => {
      let digits = '';
      while (digits.length < max && i + 1 < body.length && /[0-9a-fA-F]/.test(body[i + 1])) digits += body[++i];
      return digits;
    };
    if (e === 'x') {
      const d = hex(2);
      if (!d) out += '\\x';
      else out += String.fromCharCode(parseInt(d, 16));
      continue;
    }
    if (e === 'u' || e === 'U') {
      const d = hex(e === 'u' ? 4 : 8);
      if (!d) out += '\\' + e;
      else {
        const cp = parseInt(d, 16);
        if (cp > 0x10ffff) return undefined;
        out += String.fromCodePoint(cp);
      }
      continue;
    }
    if (e === 'c') {
      if (i + 1 >= body.length) return undefined;
      out += String.fromCharCode(body[++i].toUpperCase().charCodeAt(0) & 0x1f);
      continue;
    }
    out += '\\' + e;
  }
  return out.includes('\0') ? undefined : out;
}

function fromParts(text: string, parts: Part[], assignment = false): Word {
  let value = '';
  const quoted: boolean[] = [];
  let dynamic: DynamicKind | undefined;
  let splits = false;
  for (const part of parts) {
    if (part.kind === 'dyn') {
      dynamic ??= part.why;
      if (!part.quoted) splits = true;
      continue;
    }
    if (dynamic) continue;
    value += part.text;
    quoted.push(...part.quoted);
  }
  if (dynamic) return { text, prefix: value, dynamic, splits, glob: false };
  if (hasBraceExpansion(value, quoted)) return { text, prefix: '', dynamic: 'brace', splits: true, glob: false };
  if (hasTilde(value, quoted, assignment)) return { text, prefix: '', dynamic: 'tilde', splits: false, glob: false };
  const glob = Array.prototype.some.call(value, (c: string, i: number) => !quoted[i] && (c === '*' || c === '?' || c === '['));
  return { text, value, prefix: value, splits: false, glob };
}

/** An unquoted `{` … `}` pair with a `,` or `..` between them: bash brace expansion (conservatively detected). */
function hasBraceExpansion(value: string, quoted: readonly boolean[]): boolean {
  for (let i = 0; i < value.length; i++) {
    if (value[i] !== '{' || quoted[i]) continue;
    if (i > 0 && value[i - 1] === '$') continue;
    let depth = 0;
    for (let j = i + 1; j < value.length; j++) {
      if (quoted[j]) continue;
      if (value[j] === '{') depth++;
      else if (value[j] === '}') {
        if (depth === 0) {
          const inner = value.slice(i + 1, j);
          if (inner.includes(',') || inner.includes('..')) return true;
          break;
        }
        depth--;
      }
    }
  }
  return false;
}

function hasTilde(value: string, quoted: readonly boolean[], assignment: boolean): boolean {
  if (value[0] === '~' && !quoted[0]) return true;
  // Bash also expands `~` after `=` in words that look like assignments (`a=~/x`), and after `:` in assignments.
  for (let i = 1; i < value.length; i++) {
    if (value[i] !== '~' || quoted[i]) continue;
    const before = value[i - 1];
    if (before === '=' && !quoted[i - 1] && (assignment || /^[A-Za-z_][A-Za-z0-9_]*=$/.test(value.slice(0, i)))) return true;
    if (before === ':' && !quoted[i - 1] && assignment) return true;
  }
  return false;
}

/** Splits an `env -S` string like coreutils does, for the static cases; undefined when it expands or escapes. */
export function splitEnvString(s: string): string[] | undefined {
  if (s.includes('$') || s.includes('\\')) return undefined;
  const words: string[] = [];
  let cur = '';
  let inWord = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === "'" || c === '"') {
      const end = s.indexOf(c, i + 1);
      if (end < 0) return undefined;
      cur += s.slice(i + 1, end);
      inWord = true;
      i = end;
      continue;
    }
    if (c === '#' && !inWord) break;
    if (c === ' ' || c === '\t' || c === '\n') {
      if (inWord) words.push(cur);
      cur = '';
      inWord = false;
      continue;
    }
    cur += c;
    inWord = true;
  }
  if (inWord) words.push(cur);
  return words;
}

/** `a*b` style pattern (bash globbing, no extglob) as an anchored regular expression. */
export function globToRegExp(pattern: string): RegExp {
  let re = '^';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 2);
      if (end < 0) re += '\\[';
      else {
        let body = pattern.slice(i + 1, end);
        if (body[0] === '!' || body[0] === '^') body = '^' + body.slice(1);
        re += '[' + body.replace(/\\/g, '\\\\') + ']';
        i = end;
      }
    } else re += c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  }
  return new RegExp(re + '$');
}

/** Used by tests and messages: the literal value or a placeholder for what is computed at run time. */
export function describeWord(w: Word): string {
  return w.value ?? `${w.prefix}<${w.dynamic}>`;
}
