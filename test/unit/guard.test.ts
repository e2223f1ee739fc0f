import test from 'ava';
import type { Parser } from 'web-tree-sitter';
import {
  GUARD_REASONS,
  GUARD_REASON_CODES,
  decideCommand,
  guardVerdict,
  formatRefusal,
  guardCommand,
  loadBashParser,
  type GuardDecision,
} from '../../activities/bash/guard';
import { KNOWN_GIT_SUBCOMMANDS } from '../../activities/bash/guard/git-argv';
import { BRANCH, CORPUS, CORPUS_ENTRIES, WORKTREE } from './guard-corpus';

const isolated = { branch: BRANCH, worktree: WORKTREE, isolated: true };
let parser: Parser;
test.before(async () => {
  parser = await loadBashParser();
});

const show = (d: GuardDecision) =>
  d.allowed ? `allowed${d.unsure ? ` with notes: ${d.unsure.map((n) => n.why).join('; ')}` : ''}` : `refused ${d.reason}: ${d.why} [${d.refused}]`;
const title = (group: string, command: string, index: number) => {
  const shown = JSON.stringify(command);
  return `corpus ${index + 1} (${group}): ${shown.length > 90 ? `${shown.slice(0, 90)}…"` : shown}`;
};

CORPUS_ENTRIES.forEach((entry, index) => {
  test(title(entry.group, entry.command, index), (t) => {
    const d = decideCommand(parser, entry.command, isolated);
    const note = entry.note ? ` (${entry.note})` : '';
    const got = d.allowed ? (d.unsure ? 'unsure' : 'allow') : 'deny';
    t.is(got, entry.expect, `expected ${entry.expect}${entry.reason ? ` (${entry.reason})` : ''}${note}; got ${show(d)}`);
    if (!d.allowed && entry.reason) t.is(d.reason, entry.reason, `${show(d)}${note}`);
    if (entry.claims) t.deepEqual(d.allowed ? (d.history ?? []).map((c) => c.kind) : [], entry.claims, `claims${note}`);
    // Allowed with notes under the sandbox; the guard alone refuses it, with the reason the text shows.
    if (d.allowed && entry.expect === 'unsure' && entry.reason) {
      const alone = guardVerdict(d, { confined: false });
      t.is(alone.allowed ? 'allowed' : alone.reason, entry.reason, `unconfined: ${show(alone)}${note}`);
    }
  });
});

test('the corpus has at least 150 commands, both decisions, and most reason codes', (t) => {
  t.true(CORPUS_ENTRIES.length >= 150, `${CORPUS_ENTRIES.length} entries`);
  t.true(CORPUS_ENTRIES.some((e) => e.expect === 'allow'));
  t.true(CORPUS_ENTRIES.some((e) => e.expect === 'deny'));
  t.true(CORPUS_ENTRIES.some((e) => e.expect === 'unsure'));
  const used = new Set(CORPUS_ENTRIES.map((e) => e.reason).filter(Boolean));
  // guard_cannot_judge comes from guardVerdict (no sandbox), never from decideCommand itself.
  const unused = GUARD_REASON_CODES.filter((code) => !used.has(code) && code !== 'guard_cannot_judge');
  t.deepEqual(unused, [], 'every reason code has at least one corpus entry');
  const unique = new Set(CORPUS_ENTRIES.map((e) => e.command));
  t.is(unique.size, CORPUS_ENTRIES.length, 'no duplicate commands');
});

test('a non-isolated session is never restricted', (t) => {
  for (const entry of CORPUS_ENTRIES) {
    t.deepEqual(decideCommand(parser, entry.command, { ...isolated, isolated: false }), { allowed: true }, entry.command);
  }
});

test('text that merely mentions git verbs is never refused', (t) => {
  for (const command of ['echo "git merge"', 'grep -r checkout .', 'git log --grep=merge', 'git commit -m "merge the rebase notes"']) {
    t.true(decideCommand(parser, command, isolated).allowed, command);
  }
});

test('every refusal says what, why and what to do instead, with the session filled in', (t) => {
  for (const entry of CORPUS_ENTRIES.filter((e) => e.expect === 'deny')) {
    const d = decideCommand(parser, entry.command, isolated);
    if (d.allowed) continue; // reported by the corpus test
    t.true(d.refused.length > 0, `refused text for ${entry.command}`);
    t.true(d.why.length > 0 && d.instead.length > 0, entry.command);
    t.false(/\{branch\}|\{worktree\}/.test(d.why + d.instead), `placeholders left in ${entry.command}`);
  }
});

test('integration and cross-branch refusals name the orchestrator route', (t) => {
  for (const command of ['git merge main', 'git push origin HEAD:main', 'git checkout main', 'git stash pop', 'cd .. && git status']) {
    const d = decideCommand(parser, command, isolated);
    if (d.allowed) return t.fail(command);
    t.regex(d.instead, /session send <orchestrator> "/, command);
    t.regex(d.instead, new RegExp(BRANCH.replace('/', '\\/')), command);
  }
});

test('an integration refusal points at git restore; the recovery verbs are named', (t) => {
  const d = decideCommand(parser, 'git merge main', isolated);
  if (d.allowed) return t.fail('merge allowed');
  t.is(d.reason, 'integration_policy');
  t.regex(d.instead, /git restore --staged/);
  t.regex(d.instead, /--abort/);
});

test('the refused text is the innermost offending command', (t) => {
  const d = decideCommand(parser, "ls && bash -c 'echo hi; git merge main'", isolated);
  if (d.allowed) return t.fail();
  t.is(d.refused, 'git merge main');
  t.regex(d.why, /^inside `bash -c`/);
});

test('reason codes are data: each has a summary and an instead text', (t) => {
  t.true(GUARD_REASON_CODES.length >= 20);
  for (const code of GUARD_REASON_CODES) {
    t.true(GUARD_REASONS[code].summary.length > 0 && GUARD_REASONS[code].instead.length > 0, code);
  }
  t.true(KNOWN_GIT_SUBCOMMANDS.includes('status') && !KNOWN_GIT_SUBCOMMANDS.includes('co'));
});

test('the parser is loaded once per process', async (t) => {
  t.is(await loadBashParser(), await loadBashParser());
  t.is(await loadBashParser(), parser);
});

test('guardCommand loads the parser and decides', async (t) => {
  t.deepEqual(await guardCommand('git status', isolated), { allowed: true });
  const d = await guardCommand('git merge main', isolated);
  t.false(d.allowed);
  t.deepEqual(await guardCommand('git merge main', { ...isolated, isolated: false }), { allowed: true });
});

test('a relative worktree is a programming error, not a decision', (t) => {
  t.throws(() => decideCommand(parser, 'git status', { ...isolated, worktree: 'wt/s1' }), { instanceOf: TypeError });
  t.throws(() => decideCommand(parser, 'git status', { ...isolated, branch: '' }), { instanceOf: TypeError });
});

test('a trailing slash on the worktree changes nothing', (t) => {
  t.true(decideCommand(parser, 'git -C /work/wt/s1/src status', { ...isolated, worktree: '/work/wt/s1/' }).allowed);
  t.false(decideCommand(parser, 'git -C /work/wt/s10 status', isolated).allowed, 'a sibling with a common prefix is outside');
});

test('formatRefusal renders the tool result', (t) => {
  const d = decideCommand(parser, 'git merge main', isolated);
  const text = formatRefusal(d);
  t.regex(text, /^Refused by the workspace guard \(integration_policy\): git merge main\nWhy: .+\nInstead: .+session send/s);
  t.is(formatRefusal({ allowed: true }), 'allowed');
});

test('the corpus groups cover every construct the issue lists', (t) => {
  const groups = Object.keys(CORPUS).join('\n');
  for (const needle of [
    'wrappers',
    'spellings of git',
    'nesting',
    'blind spots',
    'hidden execution',
    'stdin',
    'interpreters',
    'dynamic command',
    'computed arguments',
    'outside the worktree',
    'shared state',
    'push of B',
    'fetch',
  ]) {
    t.true(groups.includes(needle), needle);
  }
});

test('a trap action and a function body run where the sandbox confines them; with the guard alone they are refused', async (t) => {
  const { guardVerdict } = await import('../../activities/bash/guard');
  for (const command of ["trap 'rm -rf build' EXIT; make", 'cleanup() { rm -rf build; }; make; cleanup']) {
    const raw = decideCommand(parser, command, isolated);
    t.true(raw.allowed && (raw.unsure?.length ?? 0) > 0, show(raw));
    t.true(guardVerdict(raw, { confined: true }).allowed, command);
    t.like(guardVerdict(raw, { confined: false }), { allowed: false, reason: 'guard_cannot_judge' }, command);
  }
});
