import type { Node, Parser } from 'web-tree-sitter';
import { decideInvocation, declarationCheck, judgeWrite } from './commands';
import { checkAssignment, pathIsWritable } from './env';
import { note, type GuardScope, type Invocation, type ShellState, type Stdin } from './invocation';
import { parseBash, type Tree } from './parser';
import { checkWriteTarget, joinCwd, sameCwd, type Cwd } from './paths';
import { prescan } from './prescan';
import { refusal, type GuardReason, type Refusal } from './reasons';
import { arithmeticNames, provenanceOf, scanTaint, specialProvenance, worst, type Provenance } from './taint';
import { dynamicWord, exactValue, resolveAssignmentValue, resolveWord, type Word } from './words';

/**
 * The AST walk: every node kind is on an allowlist, every command at every depth (lists, pipelines, subshells,
 * substitutions, heredoc bodies, `sh -c` strings) is decided in document order, and the working directory
 * flows through the list. Text the parser did not see as code (the blind spots of GUARD.md §2.1) is refused.
 */

const MAX_SCRIPT_DEPTH = 8;

export interface ScriptOptions {
  readonly depth: number;
  readonly stdin: Stdin;
  readonly origin?: string;
  readonly zsh?: boolean;
}

export function analyzeScript(parser: Parser, source: string, scope: GuardScope, state: ShellState, options: ScriptOptions): Refusal | undefined {
  const within = (r: Refusal | undefined): Refusal | undefined =>
    r && options.origin && !r.why.startsWith('inside ') ? { ...r, why: `inside ${options.origin}: ${r.why}` } : r;
  if (options.depth > MAX_SCRIPT_DEPTH) {
    return refusal('unresolved_launcher', source, `shell code nested more than ${MAX_SCRIPT_DEPTH} levels deep`);
  }
  const early = prescan(source);
  if (early) return within(early);
  // `OLDPWD=/elsewhere; cd -`, `read PWD; cd .`, `DIRSTACK[1]=…; popd`, `read CDPATH; cd x`: cd follows these.
  if (/(^|[^$\w{])(OLDPWD|DIRSTACK|PWD|CDPATH)\b/.test(source)) state.dirVars = true;
  let tree = parseBash(parser, source);
  // `time { …; }` / `time ( … )`: the keyword is blanked (same length) so the group parses as bash reads it.
  for (let untimed = timedGroup(tree, source); untimed !== undefined; untimed = timedGroup(tree, source)) {
    tree.delete();
    source = untimed;
    tree = parseBash(parser, source);
  }
  try {
    const root = tree.rootNode;
    if (root.hasError) {
      const bad = firstError(root);
      const where = bad ? ` near \`${snippet(bad.text || source.slice(bad.startIndex, bad.startIndex + 20))}\`` : '';
      return within(refusal('parse_error', source, `tree-sitter-bash reports a syntax error${where}`));
    }
    const spot = blindSpot(root, source);
    if (spot) return within(refusal('parser_blind_spot', snippet(spot.text, 200), spot.why));
    state.taint = scanTaint(root, options.depth > 0 ? state.taint : undefined);
    const walker = new Walker(parser, source, scope, state, options);
    return within(walker.visit(root));
  } finally {
    tree.delete();
  }
}

/**
 * The `time` keyword before a compound command, as source with `time` (and `-p`) blanked out; undefined when there
 * is none. Only a plain `time` word in command position is the keyword; `time -o f cmd` (the program) is left alone.
 */
function timedGroup(tree: Tree, source: string): string | undefined {
  const find = (node: Node): string | undefined => {
    if (node.type === 'command' && !node.namedChildren.some((c) => c?.type === 'variable_assignment')) {
      const name = node.childForFieldName('name');
      if (name?.text === 'time') {
        const m = /^((?:[ \t]+-p)*)[ \t]+(?:[({!]|\[\[|(?:if|for|while|until|case|select)[ \t\n])/.exec(source.slice(name.endIndex));
        if (m) return source.slice(0, name.startIndex) + ' '.repeat(name.endIndex - name.startIndex + m[1].length) + source.slice(name.endIndex + m[1].length);
      }
    }
    for (const child of node.namedChildren) {
      const found = child ? find(child) : undefined;
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return find(tree.rootNode);
}

function firstError(node: Node): Node | undefined {
  if (node.isError || node.isMissing) return node;
  for (const child of node.children) {
    if (child && (child.hasError || child.isMissing || child.isError)) {
      const found = firstError(child);
      if (found) return found;
    }
  }
  return undefined;
}

const snippet = (text: string, max = 80) => (text.length > max ? `${text.slice(0, max)}…` : text);

// ---------------------------------------------------------------------------------------------------------------
// Blind spots: code-like text outside the nodes the parser recognised as code.

const INERT = new Set(['comment', 'raw_string', 'ansi_c_string']);

function blindSpot(node: Node, source: string): { text: string; why: string } | undefined {
  if (INERT.has(node.type)) return undefined;
  if (node.type === 'heredoc_body' && isQuotedHeredoc(node.parent)) return undefined;
  if (node.type === 'subshell' && node.text.startsWith('((')) {
    return { text: node.text, why: '`((…))` is arithmetic to bash (nested subshells need a space: `( (…) )`)' };
  }
  if (node.type === 'command_substitution' && node.text.startsWith('$((')) {
    return { text: node.text, why: '`$((…))` here is parsed as a command substitution, but bash evaluates it as arithmetic' };
  }
  if (node.type === 'heredoc_redirect') {
    const early = heredocTerminator(node);
    if (early) return early;
  }
  // Backtick substitutions are un-escaped and parsed again by the walker, which checks them then.
  if (node.type === 'command_substitution' && node.child(0)?.type === '`') return undefined;
  if (node.childCount === 0) {
    if (!node.isNamed) return undefined;
    if ((node.type === 'word' || node.type === 'number') && unescapedBlank(node.text)) {
      return { text: node.text, why: 'an unquoted word containing a newline or blank: bash splits it (a new command may start there), the parser did not' };
    }
    return codeInText(node.text);
  }
  let at = node.startIndex;
  for (const child of node.children) {
    if (!child) continue;
    const gap = codeInText(source.slice(at, child.startIndex)) ?? oddGap(node, source.slice(at, child.startIndex));
    if (gap) return gap;
    const inner = blindSpot(child, source);
    if (inner) return inner;
    at = child.endIndex;
  }
  return codeInText(source.slice(at, node.endIndex)) ?? oddGap(node, source.slice(at, node.endIndex));
}

const TEXT_NODES = new Set(['string', 'translated_string', 'heredoc_body', 'heredoc_redirect']);
const WORD_LISTS = new Set(['command', 'declaration_command', 'unset_command', 'file_redirect', 'herestring_redirect']);

/**
 * Between the words of a command only blanks and `\⏎` continuations belong. A backslash that escapes something
 * else, or a bare newline, there means the parser dropped text bash reads (seen: `main⏎\ x` read as one command).
 */
function oddGap(node: Node, gap: string): { text: string; why: string } | undefined {
  if (TEXT_NODES.has(node.type)) return undefined;
  for (let i = 0; i < gap.length; i++) {
    if (gap[i] === '\\') {
      if (gap[i + 1] === '\n') {
        i++;
        continue;
      }
      return { text: node.text, why: 'a backslash the parser skipped between words (bash reads it as an escaped character)' };
    }
    if (gap[i] === '\n' && WORD_LISTS.has(node.type) && gap[i - 1] !== '\\') {
      return { text: node.text, why: 'a newline inside one command: bash ends the command there, the parser continued it' };
    }
  }
  return undefined;
}

/** A blank the lexer kept inside an unquoted word (seen: `git status⏎\\git merge main` as one command). */
function unescapedBlank(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '\\') {
      i++;
      continue;
    }
    if (text[i] === '\n' || text[i] === ' ' || text[i] === '\t') return true;
  }
  return false;
}

/** Unescaped backticks, `$(`, `${` or `$[` in text the parser treated as plain: bash would run or expand them. */
function codeInText(text: string): { text: string; why: string } | undefined {
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    const dollar = c === '$' && (text[i + 1] === '(' || text[i + 1] === '{' || text[i + 1] === '[');
    if (c !== '`' && !dollar) continue;
    let slashes = 0;
    for (let j = i - 1; j >= 0 && text[j] === '\\'; j--) slashes++;
    if (slashes % 2 === 1) continue;
    const what = c === '`' ? 'a backtick' : `\`${text.slice(i, i + 2)}\``;
    return { text, why: `${what} in text the parser does not treat as code (e.g. inside \${…} patterns or heredoc bodies); bash may run it` };
  }
  return undefined;
}

function isQuotedHeredoc(redirect: Node | null): boolean {
  const start = redirect?.children.find((c) => c?.type === 'heredoc_start');
  return !!start && /['"\\]/.test(start.text);
}

/** Bash ends a heredoc at the first line equal to its delimiter; if the parser's body holds such a line, they disagree. */
function heredocTerminator(redirect: Node): { text: string; why: string } | undefined {
  const start = redirect.children.find((c) => c?.type === 'heredoc_start');
  const body = redirect.children.find((c) => c?.type === 'heredoc_body');
  if (!start || !body) return undefined;
  const delimiter = start.text.replace(/['"\\]/g, '');
  const dash = redirect.children.some((c) => c?.type === '<<-');
  const lines = body.text.split('\n');
  for (const line of lines) {
    const candidate = dash ? line.replace(/^\t+/, '') : line;
    if (candidate === delimiter)
      return { text: redirect.text, why: `the heredoc body contains its own delimiter line \`${delimiter}\`: bash ends the heredoc there` };
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------

const PASS_THROUGH = new Set([
  'program',
  'do_group',
  'elif_clause',
  'else_clause',
  'if_statement',
  'case_statement',
  'case_item',
  'redirected_statement',
  'herestring_redirect',
  'heredoc_body',
  'concatenation',
  'string',
  'command_name',
  'heredoc_start',
  'heredoc_end',
  'heredoc_content',
  'string_content',
  'word',
  'raw_string',
  'ansi_c_string',
  'number',
  'comment',
  'variable_name',
  'special_variable_name',
  'file_descriptor',
  'test_operator',
  'regex',
  'simple_expansion',
  'translated_string',
  'brace_expression',
  'array',
  'process_substitution',
  'unary_expression',
  'binary_expression',
  'parenthesized_expression',
  'postfix_expression',
  'ternary_expression',
  'variable_assignments',
]);

const ARITHMETIC_TEST_OPS = new Set(['-eq', '-ne', '-lt', '-le', '-gt', '-ge']);
/** Where a failed command leaves the shell: only a `cd` moves one path away from the other. */
const FAIL_TRANSPARENT = new Set(['redirected_statement', 'command']);
const RESERVED = new Set([
  'if',
  'then',
  'else',
  'elif',
  'fi',
  'case',
  'esac',
  'for',
  'select',
  'while',
  'until',
  'do',
  'done',
  'in',
  'function',
  '{',
  '}',
  '[[',
  ']]',
  '!',
]);

class Walker {
  /**
   * The working directory on the path where the statement just walked failed, when that differs from
   * `state.cwd` (the path where it succeeded): `cd x` that fails leaves the shell where it was.
   */
  private failCwd: Cwd | undefined;
  /** The command just walked was `exit`: nothing after it on that path runs. */
  private exited = false;

  constructor(
    private readonly parser: Parser,
    private readonly source: string,
    private readonly scope: GuardScope,
    private readonly state: ShellState,
    private readonly options: ScriptOptions,
  ) {}

  private deny(reason: GuardReason, node: Node, why: string): Refusal {
    return refusal(reason, snippet(node.text, 200), why);
  }

  visit(node: Node): Refusal | undefined {
    if (!node.isNamed) return undefined;
    const type = node.type;
    switch (type) {
      case 'command': {
        const inner = this.children(node);
        return inner ?? this.command(node);
      }
      case 'list':
        return this.list(node);
      case 'negated_command': {
        const r = this.children(node);
        if (this.failCwd) [this.state.cwd, this.failCwd] = [this.failCwd, this.state.cwd];
        return r;
      }
      case 'subshell':
        return this.isolated(node, 'exact');
      case 'pipeline':
        // Every part of a pipeline runs in a subshell (the last one in this shell under `lastpipe`).
        return this.isolated(node, 'join');
      case 'function_definition': {
        // Its body is code the guard can read: a policy violation in it is refused here, where it is defined. What
        // the guard cannot know is where and how often it runs (from whatever directory the shell is in then, in
        // place of any command of that name): noted, so the sandbox decides — and with the guard alone, refused.
        const name = node.childForFieldName('name')?.text ?? '?';
        note(
          this.state,
          snippet(node.text, 80),
          `a function (\`${name}\`): the guard reads its body where it is defined, not where it is called, and a call runs it in place of any command named \`${name}\``,
        );
        const body = node.childForFieldName('body');
        return body ? this.isolated(body, 'exact') : undefined;
      }
      case 'declaration_command':
        return this.children(node) ?? this.declaration(node);
      case 'unset_command':
        return this.children(node) ?? this.unset(node);
      case 'variable_assignment':
        return this.assignment(node) ?? this.children(node);
      case 'file_redirect':
        return this.fileRedirect(node) ?? this.children(node);
      case 'heredoc_redirect':
        if (node.childrenForFieldName('argument').length > 0) {
          return this.deny(
            'parser_blind_spot',
            node,
            'words after a heredoc marker are arguments of the command, but the parser attaches them to the heredoc; put them before `<<`',
          );
        }
        return this.children(node);
      case 'arithmetic_expansion':
        if (node.child(0)?.type === '$[') return this.deny('hidden_execution', node, '`$[ … ]` is deprecated arithmetic the parser reads poorly');
        return this.arithmetic(node, node) ?? this.children(node);
      case 'compound_statement':
        if (node.child(0)?.type === '((') return this.arithmetic(node, node) ?? this.children(node);
        return this.children(node);
      case 'c_style_for_statement':
        return this.arithmetic(node, node, true) ?? this.loop(node);
      case 'while_statement':
      case 'for_statement':
        return this.loop(node);
      case 'expansion':
        return this.expansion(node) ?? this.children(node);
      case 'subscript':
        return this.subscript(node) ?? this.children(node);
      case 'test_command':
        return this.testCommand(node) ?? this.children(node);
      case 'command_substitution':
        if (node.child(0)?.type === '`') return this.backtick(node);
        return this.isolated(node, 'exact');
      case 'process_substitution':
        return this.isolated(node, 'exact');
      case 'extglob_pattern':
        // The grammar names every `case` / `[[ == ]]` pattern so; only `?(…)`, `*(…)`, `+(…)`, `@(…)`, `!(…)` are extglob.
        if (/[?*+@!]\(/.test(node.text)) return this.deny('unsupported_syntax', node, 'extended glob patterns are not analysed');
        return undefined;
      default:
        if (PASS_THROUGH.has(type)) return this.children(node);
        return this.deny('unsupported_syntax', node, `the guard does not analyse \`${type}\` nodes`);
    }
  }

  private children(node: Node): Refusal | undefined {
    for (const child of node.children) {
      if (!child) continue;
      const r = this.visit(child);
      if (r) return r;
      // After a statement both paths go on: a `cd` that may have failed leaves either directory.
      if (this.failCwd && !FAIL_TRANSPARENT.has(node.type)) {
        if (!this.errexit(child)) this.state.cwd = joinCwd(this.state.cwd, this.failCwd, this.scope.worktree);
        this.failCwd = undefined;
      }
    }
    return undefined;
  }

  /** `set -e` ends the script when a plain statement fails; bash ignores it in conditions and `&&`/`||` lists. */
  private errexit(node: Node): boolean {
    if (!this.state.errexit) return false;
    for (let p = node.parent; p; p = p.parent) {
      if (['list', 'negated_command', 'if_statement', 'elif_clause', 'while_statement', 'pipeline'].includes(p.type)) return false;
    }
    return true;
  }

  /** `a && b`, `a || b`: the right side runs on the left's success (or failure) path. */
  private list(node: Node): Refusal | undefined {
    const [left, right] = node.namedChildren.filter((c): c is Node => !!c && c.type !== 'comment');
    const op = node.children.find((c) => c && !c.isNamed && (c.type === '&&' || c.type === '||'))?.type;
    if (!left || !right || !op) return this.children(node);
    let r = this.visit(left);
    if (r) return r;
    const leftOk = this.state.cwd;
    const leftFail = this.failCwd ?? leftOk;
    this.failCwd = undefined;
    this.state.cwd = op === '&&' ? leftOk : leftFail;
    this.exited = false;
    r = this.visit(right);
    if (r) return r;
    if (this.exited) {
      // `cd x || exit 1`: only the left's success path goes on (`… && exit`: only its failure path).
      this.exited = false;
      this.state.cwd = op === '||' ? leftOk : leftFail;
      this.failCwd = undefined;
      return undefined;
    }
    const rightOk = this.state.cwd;
    const rightFail = this.failCwd ?? rightOk;
    const w = this.scope.worktree;
    const ok = op === '&&' ? rightOk : joinCwd(leftOk, rightOk, w);
    const fail = op === '&&' ? joinCwd(leftFail, rightFail, w) : rightFail;
    this.state.cwd = ok;
    this.failCwd = sameCwd(ok, fail) ? undefined : fail;
    return undefined;
  }

  /**
   * A subshell's `cd` does not reach the parent: 'exact' restores the directory; 'join' keeps either (a pipeline's
   * last part may run in this shell).
   */
  private isolated(node: Node, mode: 'exact' | 'join'): Refusal | undefined {
    const saved = { cwd: this.state.cwd, oldCwd: this.state.oldCwd, stack: [...this.state.stack], errexit: this.state.errexit };
    const r = this.children(node);
    if (mode === 'exact' || !sameCwd(saved.cwd, this.state.cwd)) {
      const after = this.state.cwd;
      Object.assign(this.state, saved);
      if (mode === 'join') this.state.cwd = joinCwd(saved.cwd, after, this.scope.worktree);
    }
    this.failCwd = undefined;
    return r;
  }

  /**
   * Bash reads the text between backticks again after removing the backslash before `\\`, `` ` `` and `$`, so
   * `` `\$CMD x` `` runs `$CMD x`. The parser does not; the un-escaped text is analysed as a script instead.
   * (A `\"` inside double quotes is left escaped: that can only show the guard more code, never less.)
   */
  private backtick(node: Node): Refusal | undefined {
    const open = node.child(0);
    const close = node.child(node.childCount - 1);
    if (!open || !close || close.type !== '`' || close.id === open.id) {
      return this.deny('parser_blind_spot', node, 'an unterminated backtick substitution');
    }
    const inner = this.source.slice(open.endIndex, close.startIndex).replace(/\\([\\`$])/g, '$1');
    // A subshell: nothing it changes reaches this shell.
    const state: ShellState = { ...this.state, stack: [...this.state.stack], errexit: false };
    return analyzeScript(this.parser, inner, this.scope, state, {
      depth: this.options.depth + 1,
      stdin: this.options.stdin,
      origin: 'a backtick substitution',
    });
  }

  private loop(node: Node): Refusal | undefined {
    if (node.type === 'for_statement') {
      // The loop variable is assigned each value (and exported, if it already was).
      const name = node.childForFieldName('variable')?.text ?? '';
      const values = node.childrenForFieldName('value').filter((v): v is Node => !!v);
      for (const v of values.length > 0 ? values.map((n) => resolveWord(n)) : [dynamicWord('input', '"$@"')]) {
        const bad = checkAssignment(name, v, 'persistent', this.state.cwd, this.scope.worktree, snippet(node.text, 200), (why) =>
          note(this.state, `for ${name} in …`, why),
        );
        if (bad) return bad;
        if (name === 'PATH' && pathIsWritable(v, this.state.cwd, this.scope.worktree)) this.state.writablePath = true;
      }
    }
    this.state.loopDepth++;
    try {
      return this.children(node);
    } finally {
      this.state.loopDepth--;
    }
  }

  private command(node: Node): Refusal | undefined {
    const blind = this.keywordConfusion(node);
    if (blind) return blind;
    const assignments: { name: string; value: Word }[] = [];
    for (const child of node.namedChildren) {
      if (child?.type !== 'variable_assignment') continue;
      const nameNode = child.childForFieldName('name');
      const name = nameNode?.type === 'subscript' ? (nameNode.childForFieldName('name')?.text ?? '') : (nameNode?.text ?? '');
      assignments.push({ name, value: resolveAssignmentValue(child.childForFieldName('value')) });
    }
    const nameNode = node.childForFieldName('name');
    const argv: Word[] = [];
    if (nameNode) {
      const inner = nameNode.namedChild(0);
      argv.push(inner ? resolveWord(inner) : resolveWord(nameNode));
    }
    for (const arg of node.childrenForFieldName('argument')) if (arg) argv.push(resolveWord(arg));
    const inv: Invocation = {
      argv,
      trailingDynamic: false,
      cwd: this.state.cwd,
      text: snippet(node.text, 200),
      assignments,
      stdin: this.stdinOf(node),
    };
    const analyzer = {
      script: (source: string, state: ShellState, o: { zsh?: boolean; origin: string; stdin?: Stdin }) =>
        analyzeScript(this.parser, source, this.scope, state, { depth: this.options.depth + 1, stdin: o.stdin ?? inv.stdin, origin: o.origin, zsh: o.zsh }),
    };
    const before = this.state.cwd;
    this.exited = argv.length > 0 && argv[0].value === 'exit';
    const r = decideInvocation(inv, this.scope, this.state, analyzer);
    // Only `cd`, `pushd` and `popd` move the shell; if one fails, the shell stays where it was.
    this.failCwd = sameCwd(before, this.state.cwd) ? undefined : before;
    return r;
  }

  /**
   * tree-sitter-bash does not know `time`/`coproc` as keywords: `time { cd ..; git status; }` parses as a
   * command `time {` followed by unrelated commands, and `then`/`done`/`}` become command names. Bash runs
   * the group. Refuse whenever a reserved word shows up where the parser made it a plain word.
   */
  private keywordConfusion(node: Node): Refusal | undefined {
    const name = node.childForFieldName('name')?.namedChild(0);
    if (name?.type === 'word' && RESERVED.has(name.text)) {
      return this.deny('parser_blind_spot', node, `\`${name.text}\` is a shell keyword here, but the parser read it as a command name`);
    }
    if (name?.type === 'word' && (name.text === 'time' || name.text === 'coproc')) {
      const first = node.childrenForFieldName('argument')[0];
      const odd = node.namedChildren.some(
        (c) =>
          c &&
          c.type !== 'command_name' &&
          c.type !== 'variable_assignment' &&
          !/redirect$/.test(c.type) &&
          !node.childrenForFieldName('argument').some((a) => a?.id === c.id),
      );
      if (odd || (first && (RESERVED.has(first.text) || first.text === '{' || first.text.startsWith('[[') || first.text.startsWith('((')))) {
        return this.deny('parser_blind_spot', node, `\`${name.text}\` takes a compound command here, which the parser does not see`);
      }
    }
    for (const arg of node.childrenForFieldName('argument')) {
      if (arg?.type === 'word' && (arg.text === '{' || arg.text === '}')) {
        return this.deny('parser_blind_spot', node, 'a bare `{` or `}` word: bash may read a command group the parser does not see');
      }
    }
    // Two argv words with nothing between them are one word to bash (seen: `main"⏎"\`` split in two).
    const words = [node.childForFieldName('name'), ...node.childrenForFieldName('argument')].filter((w): w is Node => !!w);
    words.sort((a, b) => a.startIndex - b.startIndex);
    for (let k = 1; k < words.length; k++) {
      if (words[k - 1].endIndex === words[k].startIndex) {
        return this.deny(
          'parser_blind_spot',
          node,
          `\`${snippet(words[k - 1].text + words[k].text, 40)}\` is one word to bash, but the parser split it in two`,
        );
      }
    }
    return undefined;
  }

  /** Where the command's stdin comes from: its own redirects, an enclosing redirect, or the pipe before it. */
  private stdinOf(node: Node): Stdin {
    const own = this.redirectStdin(node.children.filter((c): c is Node => !!c && /redirect$/.test(c.type)));
    if (own) return own;
    let cur: Node = node;
    for (let parent = cur.parent; parent; cur = parent, parent = parent.parent) {
      if (parent.type === 'pipeline') {
        const index = parent.children.findIndex((c) => c?.id === cur.id);
        // The parser hangs a trailing heredoc on the whole pipeline; bash gives it to the last command.
        const outer = parent.parent;
        if (outer?.type === 'redirected_statement' && outer.childForFieldName('body')?.id === parent.id && index === parent.children.length - 1) {
          const r = this.redirectStdin(outer.childrenForFieldName('redirect').filter((c): c is Node => !!c));
          if (r) return r;
        }
        const before = parent.children.slice(0, index);
        if (before.some((c) => c?.type === '|' || c?.type === '|&')) return { kind: 'pipe' };
      }
      if (parent.type === 'redirected_statement' && parent.childForFieldName('body')?.id === cur.id) {
        const r = this.redirectStdin(parent.childrenForFieldName('redirect').filter((c): c is Node => !!c));
        if (r) return r;
      }
      if (parent.type === 'heredoc_redirect') return { kind: 'pipe' };
    }
    return this.options.stdin;
  }

  private redirectStdin(redirects: readonly Node[]): Stdin | undefined {
    let found: Stdin | undefined;
    for (const r of redirects) {
      if (r.type === 'herestring_redirect') {
        const content = r.namedChildren.find((c) => !!c);
        const w = content ? resolveWord(content) : undefined;
        found = w?.value !== undefined ? { kind: 'literal', text: w.value } : { kind: 'dynamic' };
      } else if (r.type === 'heredoc_redirect') {
        const body = r.children.find((c) => c?.type === 'heredoc_body');
        const literal = isQuotedHeredoc(r) || !body || body.namedChildren.every((c) => c?.type === 'heredoc_content');
        found = literal ? { kind: 'literal', text: body?.text ?? '' } : { kind: 'dynamic' };
      } else if (r.type === 'file_redirect') {
        const op = r.children.find((c) => c && !c.isNamed)?.type ?? '';
        const fd = r.childForFieldName('descriptor')?.text;
        if ((op === '<' || op === '<&' || op === '<>') && (fd === undefined || fd === '0')) found = { kind: 'file' };
      }
    }
    return found;
  }

  private declaration(node: Node): Refusal | undefined {
    const keyword = node.child(0)?.type ?? 'declare';
    let integer = false;
    let nameref = false;
    for (const child of node.namedChildren) {
      if (!child) continue;
      if (
        child.type === 'word' &&
        /^-[a-zA-Z]*f/.test(child.text) &&
        (keyword === 'export' || node.namedChildren.some((c) => c?.type === 'word' && /^-[a-zA-Z]*x/.test(c.text)))
      ) {
        return this.deny('function_or_alias', node, `\`${keyword} -f\` exports a function: every bash started later runs it in place of a command name`);
      }
      if (child.type === 'word' && /^[-+][a-zA-Z]+$/.test(child.text)) {
        if (child.text.startsWith('-') && child.text.includes('i')) integer = true;
        if (child.text.startsWith('-') && child.text.includes('n')) nameref = true;
        continue;
      }
      let name: string | undefined;
      let value: Word | undefined;
      if (child.type === 'variable_assignment') {
        const n = child.childForFieldName('name');
        name = n?.type === 'variable_name' ? n.text : undefined;
        if (n?.type === 'subscript') {
          const index = n.childForFieldName('index');
          if (index?.type === 'number') name = n.childForFieldName('name')?.text;
        }
        value = resolveAssignmentValue(child.childForFieldName('value'));
      } else if (child.type === 'variable_name') {
        name = child.text;
      }
      if (name === undefined) {
        return this.deny(
          'hidden_execution',
          node,
          `\`${keyword} ${child.text}\`: a name that is computed or has a subscript can run code when bash evaluates it`,
        );
      }
      const bad = declarationCheck({ text: snippet(node.text, 200), cwd: this.state.cwd }, keyword, name, value, integer, nameref, this.scope, this.state);
      if (bad) return bad;
    }
    return undefined;
  }

  private unset(node: Node): Refusal | undefined {
    for (const child of node.namedChildren) {
      if (!child || child.type === 'variable_name') continue;
      const w = resolveWord(child);
      const v = exactValue(w);
      if (v !== undefined && (v.startsWith('-') || /^[A-Za-z_][A-Za-z0-9_]*$/.test(v))) continue;
      return this.deny('hidden_execution', node, `\`unset ${child.text}\`: a name that is computed or has a subscript can run code when bash evaluates it`);
    }
    return undefined;
  }

  private assignment(node: Node): Refusal | undefined {
    const parent = node.parent?.type;
    if (parent === 'command' || parent === 'declaration_command' || parent === 'c_style_for_statement') return undefined;
    const nameNode = node.childForFieldName('name');
    const name = nameNode?.type === 'subscript' ? (nameNode.childForFieldName('name')?.text ?? '') : (nameNode?.text ?? '');
    const value = resolveAssignmentValue(node.childForFieldName('value'));
    return checkAssignment(name, value, 'persistent', this.state.cwd, this.scope.worktree, snippet(node.text, 200), (why) =>
      note(this.state, snippet(node.text, 80), why),
    );
    if (name === 'PATH' && pathIsWritable(value, this.state.cwd, this.scope.worktree)) this.state.writablePath = true;
  }

  private fileRedirect(node: Node): Refusal | undefined {
    const destinations = node.childrenForFieldName('destination').filter((d): d is Node => !!d);
    if (destinations.length > 1) {
      return this.deny(
        'parser_blind_spot',
        node.parent ?? node,
        'words after a redirection target are arguments of the command, but the parser attaches them to the redirection; put redirections at the end',
      );
    }
    const op = node.children.find((c) => c && !c.isNamed)?.type ?? '';
    const dest = destinations[0];
    if (!dest) return undefined;
    const writes = ['>', '>>', '&>', '&>>', '>|', '<>'].includes(op);
    const dup = op === '>&' || op === '<&';
    if (!writes && !(dup && !/^(\d+|-)$/.test(dest.text))) return undefined;
    if (dup && op === '<&') return undefined;
    if (dest.type === 'process_substitution') return undefined; // writes to a pipe; the inner command is walked
    const target = resolveWord(dest);
    return judgeWrite(
      checkWriteTarget(target, this.state.cwd, this.scope.worktree),
      snippet((node.parent ?? node).text, 200),
      `redirection \`${op} ${dest.text}\``,
      this.state,
    );
  }

  /**
   * Arithmetic evaluates variable values as expressions, and an array subscript in a value runs `$(…)`. Decided by
   * where the values come from (taint.ts): written in the script is fine, read at run time is noted, a literal
   * holding code is refused.
   */
  private arithmetic(node: Node, root: Node, skipBody = false): Refusal | undefined {
    const found = { provenance: 'clean' as Provenance, culprit: undefined as Node | undefined };
    const blame = (p: Provenance, n: Node) => {
      if (p === 'clean' || (found.culprit && worst(found.provenance, p) === found.provenance)) return;
      found.provenance = p;
      found.culprit = n;
    };
    for (const child of node.namedChildren) {
      if (!child) continue;
      if (skipBody && (child.type === 'do_group' || child.type === 'compound_statement')) continue;
      blame(this.arithmeticProvenance(child), child);
    }
    return this.judgeArithmetic(found.provenance, found.culprit, root);
  }

  /** The provenance of one operand (or composite expression) in arithmetic. */
  private arithmeticProvenance(n: Node): Provenance {
    const taint = this.state.taint;
    switch (n.type) {
      case 'number':
        return 'clean';
      case 'variable_name':
      case 'word':
      case 'raw_string':
      case 'ansi_c_string':
        return arithmeticNames(n.text).reduce<Provenance>((p, name) => worst(p, provenanceOf(taint, name)), /[$`]/.test(n.text) ? 'attack' : 'clean');
      case 'simple_expansion': {
        const inner = n.namedChild(0);
        if (!inner) return 'runtime';
        return inner.type === 'special_variable_name' || /^[0-9]+$/.test(inner.text) ? specialProvenance(taint, inner.text) : provenanceOf(taint, inner.text);
      }
      case 'command_substitution':
        return 'runtime'; // its output is evaluated as an expression (the inner commands are walked as usual)
      case 'expansion': {
        // `${#a[@]}` is a length; `${x}`, `${x:-0}` carry x's values (and any literal default).
        if (n.child(1)?.type === '#') return 'clean';
        let p: Provenance = 'clean';
        for (const c of n.namedChildren) {
          if (!c) continue;
          if (c.type === 'variable_name') p = worst(p, provenanceOf(taint, c.text));
          else if (c.type === 'special_variable_name') p = worst(p, specialProvenance(taint, c.text));
          else if (c.type === 'subscript') p = worst(p, this.subscriptProvenance(c));
          else if (c.type === 'command_substitution' || c.type === 'process_substitution') p = worst(p, 'runtime');
          else if (c.type === 'word' || c.type === 'number' || c.type === 'raw_string' || c.type === 'string')
            p = worst(p, /[$`]/.test(c.text) ? 'runtime' : 'clean');
          else p = worst(p, 'runtime');
        }
        return p;
      }
      case 'subscript':
        return this.subscriptProvenance(n);
      case 'string_content':
        return arithmeticNames(n.text).reduce<Provenance>((p, name) => worst(p, provenanceOf(taint, name)), 'clean');
      default: {
        // Operators, parentheses, strings, assignments: the operands inside decide.
        let p: Provenance = 'clean';
        for (const c of n.namedChildren) if (c) p = worst(p, this.arithmeticProvenance(c));
        return p;
      }
    }
  }

  /** `a[i]`: the element's value (the array's provenance) and the index expression. */
  private subscriptProvenance(n: Node): Provenance {
    const name = n.childForFieldName('name')?.text ?? '';
    const index = n.childForFieldName('index');
    let p = provenanceOf(this.state.taint, name);
    if (index && index.text !== '@' && index.text !== '*') p = worst(p, this.arithmeticProvenance(index));
    return p;
  }

  private judgeArithmetic(p: Provenance, culprit: Node | undefined, root: Node): Refusal | undefined {
    if (p === 'clean' || !culprit) return undefined;
    if (p === 'attack') {
      return this.deny(
        'hidden_execution',
        root,
        `arithmetic on \`${snippet(culprit.text, 40)}\`: its value is code (\`$(…)\`, \`\${…}\` or a backtick) that bash runs when it evaluates it`,
      );
    }
    note(
      this.state,
      snippet(root.text, 80),
      `arithmetic on \`${snippet(culprit.text, 40)}\`, a value read at run time: bash evaluates it as an expression, and an array subscript in it runs code`,
    );
    return undefined;
  }

  private expansion(node: Node): Refusal | undefined {
    const text = node.text;
    if (text.startsWith('${!') && !/^\$\{![A-Za-z_][A-Za-z0-9_]*(\*|@|\[[@*]\])\}$/.test(text)) {
      return this.deny(
        'hidden_execution',
        node,
        `indirect expansion \`${snippet(text, 40)}\` evaluates a name computed at run time (subscripts in it run code)`,
      );
    }
    const children = node.children;
    for (let k = 0; k < children.length; k++) {
      const child = children[k];
      if (!child || node.fieldNameForChild(k) !== 'operator') continue;
      if (child.type === '@')
        return this.deny('hidden_execution', node, `\`${snippet(text, 40)}\`: parameter transformations (\`@P\` runs command substitutions in the value)`);
      if (child.type === ':') {
        const next = children[k + 1];
        if (next && next.isNamed && next.type !== 'number') {
          const bad = this.judgeArithmetic(this.arithmeticProvenance(next), next, node);
          if (bad) return bad;
        }
      }
    }
    return undefined;
  }

  /** An array subscript is arithmetic (in assignments and expansions alike). */
  private subscript(node: Node): Refusal | undefined {
    const index = node.childForFieldName('index');
    if (!index || index.type === 'number' || index.text === '@' || index.text === '*') return undefined;
    return this.judgeArithmetic(this.arithmeticProvenance(index), index, node);
  }

  private testCommand(node: Node): Refusal | undefined {
    const double = node.child(0)?.type === '[[';
    const visit = (n: Node): Refusal | undefined => {
      for (const child of n.namedChildren) {
        if (!child || child.type === 'command_substitution' || child.type === 'process_substitution') continue;
        if (child.type === 'binary_expression' && double) {
          const op = child.childForFieldName('operator');
          if (op && ARITHMETIC_TEST_OPS.has(op.text)) {
            for (const side of [child.childForFieldName('left'), child.childForFieldName('right')]) {
              if (!side) continue;
              // `[[ x -eq y ]]` evaluates both sides as arithmetic expressions.
              const p = this.arithmeticProvenance(side);
              const bad = this.judgeArithmetic(p, side, node);
              if (bad) return bad;
            }
          }
        }
        if (child.type === 'unary_expression') {
          const op = child.childForFieldName('operator') ?? child.child(0);
          if (op && (op.text === '-v' || op.text === '-R')) {
            const operand = child.namedChildren.find((c) => c && c.type !== 'test_operator');
            const w = operand ? resolveWord(operand) : undefined;
            const v = w ? exactValue(w) : undefined;
            if (v === undefined || !/^[A-Za-z_][A-Za-z0-9_]*(\[[0-9]+\])?$/.test(v)) {
              return this.deny('hidden_execution', node, `\`${op.text} ${operand?.text ?? ''}\`: a computed or subscripted name can run code when evaluated`);
            }
          }
        }
        const inner = visit(child);
        if (inner) return inner;
      }
      return undefined;
    };
    return visit(node);
  }
}
