import test from 'ava';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import MarkdownIt from 'markdown-it';

type Token = MarkdownIt.Token;

/**
 * Every relative link in every Markdown file of the repository points at a file (or folder) that exists inside the
 * repository, and a `file.md#anchor` link at a heading of that file. Links are read by markdown-it, so links inside
 * fenced or indented code and inline code are not links; reference links are checked through their definitions.
 * Web links (any `scheme:`) and pure `#anchor` links are not checked.
 */

const ROOT = resolve(__dirname, '../..');
/** Folders that hold no Markdown of the project's own: dependencies, build output, runtime state. */
const SKIPPED_DIRS = new Set(['node_modules', 'dist', '.orchard', '.git']);

const md = new MarkdownIt({ html: true });

interface Problem {
  file: string;
  line: number;
  link: string;
  why: string;
}

/** The Markdown files under `dir`; a folder with its own `.git` (a nested repository or worktree) is not ours. */
function markdownFiles(dir: string, root = dir): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (SKIPPED_DIRS.has(entry.name) || existsSync(join(path, '.git'))) continue;
      found.push(...markdownFiles(path, root));
    } else if (entry.isFile() && entry.name.toLowerCase().endsWith('.md')) {
      found.push(path);
    }
  }
  return found.sort();
}

/** The text a heading shows, as GitHub reads it to make its anchor. */
function headingText(inline: Token): string {
  return (inline.children ?? [])
    .map((child) => (child.type === 'text' || child.type === 'code_inline' ? child.content : child.type === 'softbreak' ? ' ' : ''))
    .join('');
}

/** GitHub's heading anchors (github-slugger): lower case, punctuation dropped, spaces to `-`, repeats numbered. */
function anchorsOf(source: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const tokens = md.parse(source, {});
  tokens.forEach((token, i) => {
    if (token.type !== 'heading_open') return;
    const base = headingText(tokens[i + 1])
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-');
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  });
  // Anchors written by hand: <a name="x"></a>, <span id="x">.
  for (const m of source.matchAll(/<[a-z]+\s[^>]*\b(?:name|id)\s*=\s*["']([^"']+)["']/gi)) anchors.add(m[1].toLowerCase());
  return anchors;
}

/** Every link and image target of a Markdown text, with its line; code (fenced, indented, inline) holds none. */
function linksOf(source: string): { line: number; target: string; unresolved?: boolean }[] {
  const links: { line: number; target: string; unresolved?: boolean }[] = [];
  for (const block of md.parse(source, {})) {
    if (block.type !== 'inline' || !block.children) continue;
    // An inline token covers its whole paragraph; its line breaks say on which line a link stands.
    let line = (block.map?.[0] ?? 0) + 1;
    for (const token of block.children) {
      if (token.type === 'softbreak' || token.type === 'hardbreak') line += 1;
      else if (token.type === 'link_open') links.push({ line, target: String(token.attrGet('href') ?? '') });
      else if (token.type === 'image') links.push({ line, target: String(token.attrGet('src') ?? '') });
      else if (token.type === 'text') {
        // A full reference link whose label has no definition is left as text: `[text][label]`.
        for (const m of token.content.matchAll(/\[[^\]\n]+\]\[([^\]\n]+)\]/g)) links.push({ line, target: m[0], unresolved: true });
      }
    }
  }
  return links;
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

/** What is wrong with each relative link of one Markdown file of the repository at `root`. */
function checkFile(file: string, root: string, anchorCache = new Map<string, Set<string>>()): Problem[] {
  const problems: Problem[] = [];
  const name = relative(root, file);
  for (const { line, target, unresolved } of linksOf(readFileSync(file, 'utf8'))) {
    const problem = (why: string) => problems.push({ file: name, line, link: target, why });
    if (unresolved) {
      problem('reference link without a definition');
      continue;
    }
    if (target === '') {
      problem('empty link');
      continue;
    }
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('//') || target.startsWith('#')) continue;
    const hash = target.indexOf('#');
    const pathPart = decode((hash < 0 ? target : target.slice(0, hash)).replace(/\?.*$/, ''));
    const anchor = hash < 0 ? '' : decode(target.slice(hash + 1));
    // A leading `/` is the repository's root, as GitHub reads it.
    const path = pathPart.startsWith('/') ? join(root, pathPart) : resolve(dirname(file), pathPart);
    if (path !== root && !path.startsWith(root + sep)) {
      problem('points outside the repository');
      continue;
    }
    if (!existsSync(path)) {
      problem(`no such file: ${relative(root, path)}`);
      continue;
    }
    if (!anchor || !path.toLowerCase().endsWith('.md') || !statSync(path).isFile()) continue;
    let anchors = anchorCache.get(path);
    if (!anchors) {
      anchors = anchorsOf(readFileSync(path, 'utf8'));
      anchorCache.set(path, anchors);
    }
    if (!anchors.has(anchor.toLowerCase())) problem(`no heading #${anchor} in ${relative(root, path)}`);
  }
  return problems;
}

function checkTree(root: string): { files: string[]; problems: Problem[] } {
  const files = markdownFiles(root);
  const cache = new Map<string, Set<string>>();
  return { files, problems: files.flatMap((file) => checkFile(file, root, cache)) };
}

const report = (problems: Problem[]) => problems.map((p) => `${p.file}:${p.line}: ${p.link} — ${p.why}`).join('\n');

test('every relative link in the repository’s Markdown files points at something that exists', (t) => {
  const { files, problems } = checkTree(ROOT);
  t.true(files.includes(join(ROOT, 'README.md')), 'the walk finds README.md');
  t.true(
    files.some((f) => f.startsWith(join(ROOT, 'docs') + sep)),
    'the walk finds docs/',
  );
  t.is(problems.length, 0, `broken links:\n${report(problems)}`);
});

test('the checker finds broken links and anchors, and ignores code, web links and pure anchors', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'orchard-md-links-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(join(root, 'docs'));
  mkdirSync(join(root, 'node_modules', 'x'), { recursive: true });
  mkdirSync(join(root, 'nested'));
  mkdirSync(join(root, 'nested', '.git'));
  writeFileSync(join(root, 'node_modules', 'x', 'README.md'), '[broken](nowhere.md)\n');
  writeFileSync(join(root, 'nested', 'README.md'), '[broken](nowhere.md)\n');
  writeFileSync(
    join(root, 'docs', 'page.md'),
    ['# The page', '', '## Team CLI and the `team` demo', '', '## Limits, and known gaps', '', '## Limits, and known gaps', ''].join('\n'),
  );
  writeFileSync(
    join(root, 'README.md'),
    [
      '# Root',
      '',
      '[ok](docs/page.md) [ok dir](docs) [ok anchor](docs/page.md#team-cli-and-the-team-demo)',
      '[ok repeat](docs/page.md#limits-and-known-gaps-1) [ok root](/docs/page.md) [ok ref][r] [web](https://example.com/x.md)',
      '[mail](mailto:a@example.com) [self](#root)',
      '',
      '`[inline code](missing-inline.md)`',
      '',
      '```md',
      '[fenced](missing-fenced.md)',
      '```',
      '',
      '~~~',
      '[tilde fenced](missing-tilde.md)',
      '~~~',
      '',
      '[missing](docs/missing.md)',
      '[bad anchor](docs/page.md#no-such-heading)',
      '[outside](../outside.md)',
      '[bad ref][missing-ref]',
      '![image](img/missing.png)',
      '[bad ref target][b]',
      '',
      '[r]: docs/page.md#the-page',
      '[b]: docs/gone.md',
      '',
    ].join('\n'),
  );
  const { files, problems } = checkTree(root);
  t.deepEqual(
    files.map((f) => relative(root, f)),
    ['README.md', join('docs', 'page.md')],
  );
  t.deepEqual(
    problems.map((p) => `${p.line} ${p.link}: ${p.why}`),
    [
      '17 docs/missing.md: no such file: docs/missing.md',
      '18 docs/page.md#no-such-heading: no heading #no-such-heading in docs/page.md',
      '19 ../outside.md: points outside the repository',
      '20 [bad ref][missing-ref]: reference link without a definition',
      '21 img/missing.png: no such file: img/missing.png',
      '22 docs/gone.md: no such file: docs/gone.md',
    ],
  );
});
