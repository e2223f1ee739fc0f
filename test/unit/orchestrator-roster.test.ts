import test from 'ava';
import fc from 'fast-check';
import { ROSTER_IDLE_LIMIT, renderRoster, routableChildren, type ChildStatus, type RosterChild } from '../../workflows/orchestrator/roster';
import { topicKey } from '../../workflows/orchestrator/topic';

test('one topic however it is written; different topics stay different', (t) => {
  const same = ['PR 1741', 'pr-1741', 'pr_1741', '  Pr__1741 ', 'PR#1741', 'pr/1741', 'ＰＲ 1741'];
  t.deepEqual([...new Set(same.map(topicKey))], ['pr-1741']);
  t.not(topicKey('PR 1741'), topicKey('PR 1742'));
  t.not(topicKey('flaky login test'), topicKey('flaky logout test'));
  t.is(topicKey('Ärger im Build'), 'ärger-im-build');
  t.is(topicKey(' -- '), undefined);
  t.is(topicKey(''), undefined);
});

const word = fc.stringMatching(/^[A-Za-z0-9]{1,8}$/);
const separators = fc.stringMatching(/^[ _\-./:#]{1,3}$/);

test('property: a topic key ignores case and how words are separated, and keying a key changes nothing', (t) => {
  fc.assert(
    fc.property(fc.array(word, { minLength: 1, maxLength: 5 }), fc.array(separators, { minLength: 5, maxLength: 5 }), (words, seps) => {
      const plain = words.join(' ');
      const odd = words.map((w, i) => (i % 2 ? w.toUpperCase() : w) + seps[i]).join('');
      const key = topicKey(plain);
      return key !== undefined && topicKey(odd) === key && topicKey(key) === key;
    }),
  );
  t.pass();
});

test('property: topics that differ in a word never share a key', (t) => {
  fc.assert(
    fc.property(fc.array(word, { minLength: 1, maxLength: 4 }), fc.nat(3), word, (words, at, other) => {
      const i = at % words.length;
      fc.pre(other.toLowerCase() !== words[i].toLowerCase());
      const changed = words.map((w, j) => (j === i ? other : w));
      return topicKey(words.join(' ')) !== topicKey(changed.join(' '));
    }),
  );
  t.pass();
});

const child = (childId: string, status: ChildStatus, lastActivity: number, extra: Partial<RosterChild> = {}): RosterChild => ({
  childId,
  title: `title of ${childId}`,
  agent: 'coder',
  status,
  lastActivity,
  ...extra,
});

test('the roster lists every running child, the most recently active idle ones, and never failed, cancelled or system ones', (t) => {
  const children = [
    ...Array.from({ length: 7 }, (_, i) => child(`run-${i}`, 'running', i)),
    ...Array.from({ length: 8 }, (_, i) => child(`idle-${i}`, 'idle', 100 + i)),
    child('broken', 'failed', 1000),
    child('stopped', 'cancelled', 1001),
    child('janitor', 'running', 1002, { system: true }),
  ];
  const rows = renderRoster(children)
    .split('\n')
    .filter((line) => / \| /.test(line))
    .slice(1);
  const ids = rows.map((row) => row.split(' | ')[0]);
  t.deepEqual(
    ids.slice(0, 7).sort(),
    Array.from({ length: 7 }, (_, i) => `run-${i}`),
  );
  t.deepEqual(ids.slice(7), ['idle-7', 'idle-6', 'idle-5', 'idle-4', 'idle-3']);
  t.deepEqual(rows[7].split(' | '), ['idle-7', 'title of idle-7', 'coder', 'idle']);
});

test('a title cannot break a row, and the roster carries no envelope tag', (t) => {
  const text = renderRoster([child('c1', 'running', 1, { title: 'fix\nthe | parser' })]);
  const rows = text.split('\n').filter((line) => line.startsWith('c1 '));
  t.is(rows.length, 1);
  t.is(rows[0].split(' | ').length, 4);
  // An envelope is a tag pair around the rows (`<roster>…</roster>`); placeholders such as `<id>` are not one.
  t.notRegex(text, /<\/[A-Za-z][\w-]*>/);
  t.notRegex(renderRoster([]), /<\/[A-Za-z][\w-]*>/);
});

test('property: the routable set keeps every running child and only the newest idle ones', (t) => {
  const arbChild = fc.record({
    childId: fc.uuid(),
    title: fc.string(),
    agent: fc.constantFrom('coder', 'reviewer'),
    status: fc.constantFrom<ChildStatus>('running', 'idle', 'failed', 'cancelled'),
    lastActivity: fc.nat(10_000),
    system: fc.boolean(),
  });
  fc.assert(
    fc.property(fc.uniqueArray(arbChild, { selector: (c) => c.childId, maxLength: 30 }), (children) => {
      const picked = routableChildren(children);
      const running = children.filter((c) => c.status === 'running' && !c.system);
      const idle = children
        .filter((c) => c.status === 'idle' && !c.system)
        .map((c) => c.lastActivity)
        .sort((a, b) => b - a);
      const pickedIdle = picked.filter((c) => c.status === 'idle');
      return (
        running.every((c) => picked.includes(c)) &&
        picked.every((c) => !c.system && (c.status === 'running' || c.status === 'idle')) &&
        pickedIdle.length === Math.min(ROSTER_IDLE_LIMIT, idle.length) &&
        pickedIdle.every((c) => c.lastActivity >= (idle[ROSTER_IDLE_LIMIT - 1] ?? -1))
      );
    }),
  );
  t.pass();
});
