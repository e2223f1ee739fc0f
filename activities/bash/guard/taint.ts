import type { Node } from 'web-tree-sitter';
import { exactValue, resolveWord } from './words';

/**
 * Where a variable's values come from, decided once per script over every assignment in it (flow-insensitive,
 * so loops and later assignments count too). Bash evaluates variable values as expressions in arithmetic
 * (`$((x))`, `((x))`, `[[ x -eq 0 ]]`, `a[x]`, `let`), and an array subscript in such a value runs `$(…)`. So a
 * value written in the script (a number, a literal, a loop counter, `$#`) is `clean`; a value read at run time
 * (`read`, `$(…)`, a file name from a glob, a positional parameter of a nested script) is `runtime`, which the
 * guard cannot judge; a literal that itself holds `$(`, `${` or a backtick is `attack`.
 *
 * A name the script never assigns comes from the runner's environment, which Orchard builds from an allowlist:
 * clean at the top level, and whatever the enclosing script made it in a nested one.
 */

export type Provenance = 'clean' | 'runtime' | 'attack';

/** One assignment site: its own verdict, plus names whose values it copies (`x=$y`, `x=y`). */
interface Site {
  readonly own: Provenance;
  readonly refs: readonly string[];
}

export interface Taint {
  readonly sites: ReadonlyMap<string, readonly Site[]>;
  /** Provenance of names as the enclosing script left them (nested scripts only). */
  readonly outer?: Taint;
  /** `$1`, `$@`, `$*`: empty at the top level; anything in a nested script (`sh -c '…' _ "$x"`). */
  readonly positional: Provenance;
}

export const TOP_LEVEL_TAINT: Taint = { sites: new Map(), positional: 'clean' };

const RANK: Record<Provenance, number> = { clean: 0, runtime: 1, attack: 2 };
export const worst = (a: Provenance, b: Provenance): Provenance => (RANK[a] >= RANK[b] ? a : b);

/** The provenance of a variable's values anywhere in the script (the worst over its assignments). */
export function provenanceOf(taint: Taint, name: string, seen = new Set<string>()): Provenance {
  if (seen.has(name)) return 'clean'; // a cycle adds nothing the other sites do not already say
  seen.add(name);
  let result: Provenance = taint.outer ? provenanceOf(taint.outer, name) : 'clean';
  for (const site of taint.sites.get(name) ?? []) {
    result = worst(result, site.own);
    for (const ref of site.refs) result = worst(result, provenanceOf(taint, ref, seen));
  }
  return result;
}

/** Special parameters that always hold numbers (or the shell's own pid): safe in arithmetic. */
const NUMERIC_SPECIALS = new Set(['#', '?', '$', '!']);

/** Provenance of a special parameter like `$?` or `$1`. */
export function specialProvenance(taint: Taint, name: string): Provenance {
  if (NUMERIC_SPECIALS.has(name)) return 'clean';
  if (/^[0-9]+$|^[@*]$/.test(name)) return name === '0' ? 'clean' : taint.positional;
  return 'runtime'; // `$-`, `$_`
}

/** Identifiers in arithmetic text (`i+1`, `n<3`), skipping numeric literals such as `0x1f` or `16#ff`. */
export function arithmeticNames(text: string): string[] {
  return [...text.replace(/\b[0-9][0-9A-Za-z_#@]*/g, ' ').matchAll(/[A-Za-z_][A-Za-z0-9_]*/g)].map((m) => m[0]);
}

/** A literal value that holds code bash would run if the value were evaluated arithmetically. */
const CODE_IN_VALUE = /\$[({]|`/;

/** Builds the taint of one script from its tree; `outer` is the enclosing script's (nested scripts only). */
export function scanTaint(root: Node, outer?: Taint): Taint {
  const sites = new Map<string, Site[]>();
  const add = (name: string, site: Site) => {
    if (!name) return;
    const list = sites.get(name) ?? [];
    list.push(site);
    sites.set(name, list);
  };
  const positional: Provenance = outer ? 'runtime' : 'clean';
  const visit = (node: Node) => {
    switch (node.type) {
      case 'variable_assignment': {
        const nameNode = node.childForFieldName('name');
        const name = nameNode?.type === 'subscript' ? (nameNode.childForFieldName('name')?.text ?? '') : (nameNode?.text ?? '');
        // Inside `((…))` / `for ((…))` an assignment stores a number.
        const arithmetic = node.parent?.type === 'c_style_for_statement' || node.parent?.type === 'binary_expression';
        add(name, arithmetic ? { own: 'clean', refs: [] } : valueSite(node.childForFieldName('value'), positional));
        break;
      }
      case 'for_statement': {
        const name = node.childForFieldName('variable')?.text ?? '';
        const values = node.childrenForFieldName('value').filter((v): v is Node => !!v);
        if (values.length === 0) add(name, { own: positional, refs: [] });
        for (const v of values) {
          const w = resolveWord(v);
          // A glob becomes file names, which anyone who can write the directory chooses.
          add(name, w.glob ? { own: 'runtime', refs: [] } : valueSite(v, positional));
        }
        break;
      }
      case 'expansion': {
        // `${x:=word}` / `${x=word}` assign; the word is rarely literal, so the name is treated as read at run time.
        const op = node.children.find((c, k) => c && node.fieldNameForChild(k) === 'operator');
        if (op && (op.type === ':=' || op.type === '='))
          add(node.namedChildren.find((c) => c?.type === 'variable_name')?.text ?? '', { own: 'runtime', refs: [] });
        break;
      }
      case 'command':
        for (const name of namesReadAtRunTime(node)) add(name, { own: 'runtime', refs: [] });
        break;
      default:
        break;
    }
    for (const child of node.namedChildren) if (child) visit(child);
  };
  visit(root);
  return { sites, outer, positional };
}

/** The verdict for one assigned value, and the names whose values it copies. */
function valueSite(node: Node | null, positional: Provenance): Site {
  if (!node) return { own: 'clean', refs: [] };
  const w = resolveWord(node);
  const v = exactValue(w) ?? w.value;
  if (v !== undefined) {
    if (CODE_IN_VALUE.test(v)) return { own: 'attack', refs: [] };
    // A literal is evaluated as an expression: the names in it are evaluated in turn.
    return { own: 'clean', refs: arithmeticNames(v) };
  }
  let own: Provenance = 'clean';
  const refs: string[] = [];
  const walk = (n: Node) => {
    switch (n.type) {
      case 'arithmetic_expansion':
        return; // a number
      case 'simple_expansion': {
        const inner = n.namedChild(0);
        if (inner && (inner.type === 'special_variable_name' || /^[0-9]+$/.test(inner.text)))
          own = worst(own, NUMERIC_SPECIALS.has(inner.text) ? 'clean' : /^[0-9@*]$/.test(inner.text) ? positional : 'runtime');
        else if (inner) refs.push(inner.text);
        return;
      }
      case 'expansion': {
        if (n.children.some((c) => c && (c.type === 'command_substitution' || c.type === 'process_substitution' || c.type === '@'))) own = 'runtime';
        const name = n.namedChildren.find((c) => c?.type === 'variable_name' || c?.type === 'special_variable_name');
        if (name?.type === 'variable_name') refs.push(name.text);
        else if (name) own = worst(own, /^[0-9@*]$/.test(name.text) ? positional : NUMERIC_SPECIALS.has(name.text) ? 'clean' : 'runtime');
        for (const c of n.namedChildren) if (c && c.type !== 'variable_name' && c.type !== 'special_variable_name' && c.type !== 'subscript') walk(c);
        return;
      }
      case 'raw_string':
      case 'string_content':
      case 'word':
      case 'number':
        if (CODE_IN_VALUE.test(n.text)) own = worst(own, 'attack');
        else refs.push(...arithmeticNames(n.text));
        return;
      case 'string':
      case 'concatenation':
      case 'array':
        for (const c of n.namedChildren) if (c) walk(c);
        return;
      default:
        own = 'runtime'; // command and process substitutions, translated strings, anything unusual
    }
  };
  walk(node);
  return { own, refs };
}

/** Builtins that store what they read: `read x`, `mapfile a`, `printf -v x`, `getopts o x` (and OPTARG). */
function namesReadAtRunTime(node: Node): string[] {
  const words = [node.childForFieldName('name'), ...node.childrenForFieldName('argument')]
    .filter((w): w is Node => !!w)
    .map((w) => exactValue(resolveWord(w.type === 'command_name' ? (w.namedChild(0) ?? w) : w)));
  while (words[0] === 'builtin' || words[0] === 'command') words.shift();
  const [name, ...args] = words;
  const names: string[] = [];
  const operands = (valued: string[]) => {
    const out: string[] = [];
    for (let k = 0; k < args.length; k++) {
      const a = args[k];
      if (a === undefined) continue;
      if (valued.includes(a)) {
        k++;
        continue;
      }
      if (!a.startsWith('-')) out.push(a);
    }
    return out;
  };
  switch (name) {
    case 'read': {
      const k = args.indexOf('-a');
      if (k >= 0 && args[k + 1]) names.push(args[k + 1] as string);
      const ops = operands(['-a', '-d', '-i', '-n', '-N', '-p', '-t', '-u']);
      names.push(...(ops.length > 0 ? ops : ['REPLY']));
      break;
    }
    case 'mapfile':
    case 'readarray': {
      const ops = operands(['-d', '-n', '-O', '-s', '-u', '-c', '-C']);
      names.push(...(ops.length > 0 ? ops : ['MAPFILE']));
      break;
    }
    case 'printf':
    case 'wait': {
      const k = args.indexOf(name === 'printf' ? '-v' : '-p');
      if (k >= 0 && args[k + 1]) names.push(args[k + 1] as string);
      break;
    }
    case 'getopts':
      if (args[1]) names.push(args[1]);
      names.push('OPTARG');
      break;
    default:
      break;
  }
  return names.map((n) => n.replace(/\[.*$/, ''));
}
