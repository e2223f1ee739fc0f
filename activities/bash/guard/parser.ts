import { Language, Parser, type Tree } from 'web-tree-sitter';

/**
 * The tree-sitter-bash parser, loaded once per process: the wasm runtime and the grammar are
 * initialised on first use and every later call gets the same promise. Parsing itself is synchronous.
 */
let loading: Promise<Parser> | undefined;

export function loadBashParser(): Promise<Parser> {
  loading ??= (async () => {
    await Parser.init();
    const language = await Language.load(require.resolve('tree-sitter-bash/tree-sitter-bash.wasm'));
    const parser = new Parser();
    parser.setLanguage(language);
    return parser;
  })().catch((err: unknown) => {
    loading = undefined; // a failed load may be retried (e.g. a transient read error)
    throw err;
  });
  return loading;
}

/**
 * Parses `source` synchronously. The caller owns the tree and must `delete()` it (wasm memory is not
 * garbage-collected). Throws if the parser returns no tree, which only happens without a language.
 */
export function parseBash(parser: Parser, source: string): Tree {
  parser.reset();
  const tree = parser.parse(source);
  if (!tree) throw new Error('tree-sitter-bash returned no tree');
  return tree;
}

export type { Parser, Tree } from 'web-tree-sitter';
