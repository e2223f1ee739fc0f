/**
 * Current Details as the Web UI renders them: the Markdown each workflow publishes, parsed by markdown-it with raw HTML
 * allowed (so anything HTML-like that escaped the escaping would show up as an html token), and read back as the
 * tables and text a user sees.
 */
import test from 'ava';
import fc from 'fast-check';
import MarkdownIt from 'markdown-it';
import type { OrchestratorStatusView, SessionStatusView, TeamStatusView } from '../../contract/messages';
import { executionDetails, orchestratorDetails, sessionDetails, teamDetails } from '../../workflows/current-details';
import { mdCode, mdTable, mdText } from '../../contract/markdown';
import type { LedgerChild } from '../../workflows/orchestrator/ledger';

const md = new MarkdownIt({ html: true });
type Token = ReturnType<typeof md.parse>[number];
const HOSTILE = [
  '<script>alert(1)</script>',
  'a|b',
  '<id> <task>',
  '# heading',
  '- item\n- item',
  '`tick` and ``two``',
  '*bold* _em_',
  '[x](http://e.com)',
  '&amp; &lt;',
  '1. one',
  '> quote',
  '\\|',
  'line\n\nbreak',
  '<!-- c -->',
  '<img src=x onerror=alert(1)>',
];
const flat = (s: string) => s.replace(/\s+/g, ' ').trim();

function htmlTokens(tokens: readonly Token[]): string[] {
  return tokens.flatMap((t) => [...(t.type.startsWith('html') ? [t.content] : []), ...htmlTokens(t.children ?? [])]);
}

/** What an inline token shows as text (text, code spans, soft breaks as spaces). */
function shown(inline: Token): string {
  return (inline.children ?? []).map((c) => (c.type === 'text' || c.type === 'code_inline' ? c.content : c.type === 'softbreak' ? ' ' : '')).join('');
}

/** Tables of a document: their rows (header row first), each a list of its cells' inline tokens. */
function tables(tokens: readonly Token[]): Token[][][] {
  const out: Token[][][] = [];
  let rows: Token[][] | undefined;
  for (const [i, t] of tokens.entries()) {
    if (t.type === 'table_open') rows = [];
    else if (t.type === 'table_close' && rows) {
      out.push(rows);
      rows = undefined;
    } else if (t.type === 'tr_open') rows?.push([]);
    else if ((t.type === 'td_open' || t.type === 'th_open') && rows) rows[rows.length - 1].push(tokens[i + 1]);
  }
  return out;
}

const cellText = (rows: Token[][]) => rows.map((r) => r.map(shown));

test('mdText shows any text as itself, on one line, and nothing in it becomes HTML, a link, a heading or a list', (t) => {
  const check = (s: string) => {
    const tokens = md.parse(mdText(s, 10_000), {});
    t.deepEqual(htmlTokens(tokens), [], s);
    const blocks = tokens.filter((tk) => tk.type !== 'inline' && tk.nesting >= 0).map((tk) => tk.type);
    t.deepEqual(blocks, flat(s) === '' ? [] : ['paragraph_open'], s);
    if (flat(s) !== '') t.is(shown(tokens[1]), flat(s), s);
  };
  for (const s of HOSTILE) check(s);
  fc.assert(
    fc.property(fc.string({ unit: fc.constantFrom(...'<>|`*_[]()#-+.!\\&;:/ \nab1=\'"~{}') }), (s) => {
      check(s);
    }),
    { numRuns: 300 },
  );
});

test('mdCode shows a command as one code span with its text intact, also inside a table cell', (t) => {
  fc.assert(
    fc.property(fc.string({ minLength: 1, unit: fc.constantFrom(...'`|<> ab\\') }), (s) => {
      fc.pre(flat(s) !== '');
      const alone = md.parseInline(mdCode(s, 10_000), {})[0].children ?? [];
      t.deepEqual(
        alone.map((c) => [c.type, c.content]),
        [['code_inline', flat(s)]],
      );
      const [[, row]] = tables(md.parse(mdTable(['command'], [[{ code: s }]]), {}));
      t.deepEqual(
        (row[0].children ?? []).map((c) => [c.type, c.content]),
        [['code_inline', flat(s).length > 120 ? `${flat(s).slice(0, 119)}…` : flat(s)]],
      );
    }),
    { numRuns: 200 },
  );
});

test('mdTable: one row per entry, each cell shows its text, whatever the text holds', (t) => {
  const rows = HOSTILE.map((h, i) => [`row${i}`, h, { code: h }]);
  const doc = md.parse(mdTable(['id', 'text', 'code'], rows), {});
  t.deepEqual(htmlTokens(doc), []);
  const [table] = tables(doc);
  t.deepEqual(cellText(table), [['id', 'text', 'code'], ...HOSTILE.map((h, i) => [`row${i}`, flat(h), flat(h)])]);
});

const session: SessionStatusView = {
  sessionId: 's1',
  title: '<script>alert(1)</script>',
  agent: 'coder',
  host: 'host|a',
  repo: '/repo',
  branch: 'orchard/s1/work',
  status: 'failed_open',
  turnsCompleted: 2,
  currentTask: { taskId: 't3', turn: 3, excerpt: 'run `session send <id> <task>` | then # stop' },
  queued: 1,
  lastTurn: { turn: 2, taskId: 't2', outcome: 'failed', steps: 3, toolCalls: 2, error: { code: 'host_unavailable', message: 'no worker <for> host|a' } },
  runIndex: 0,
  error: { code: 'repository_not_found', message: '<dir> is gone' },
};

test('a session: the failure reason and the error, with hostile text shown as written', (t) => {
  const text = sessionDetails(session);
  const doc = md.parse(text, {});
  t.deepEqual(htmlTokens(doc), []);
  const paragraphs = doc.filter((tk) => tk.type === 'inline').map(shown);
  t.true(paragraphs.includes('now: turn 3 — run `session send <id> <task>` | then # stop'), paragraphs.join('\n'));
  t.true(paragraphs.includes('failure reason: host_unavailable — no worker <for> host|a'), paragraphs.join('\n'));
  t.true(paragraphs.includes('error: repository_not_found — <dir> is gone'), paragraphs.join('\n'));
  t.true(paragraphs.includes('branch orchard/s1/work on host host|a'), paragraphs.join('\n'));
});

const child = (childId: string, title: string, status: LedgerChild['status'], lastActivity: number, system?: true): LedgerChild => ({
  childId,
  title,
  agent: 'coder',
  status,
  routingAliases: [],
  provenance: { turn: 1, callId: 'c' },
  lastActivity,
  turnEnds: 1,
  ...(system ? { system } : {}),
});

test('an orchestrator: its children as table rows, newest first, system agents left out, the route command as code', (t) => {
  const children = [child('fix-login', 'a|b <b>x</b>', 'running', 3), child('docs', '# docs', 'failed', 2), child('sys', 'system', 'idle', 9, true)];
  const view: OrchestratorStatusView = {
    orchestratorId: 'o',
    status: 'idle',
    children,
    turnsCompleted: 4,
    queued: 0,
    turns: [],
    deliveries: [],
    groups: [],
    proposals: [],
    runIndex: 1,
  };
  const doc = md.parse(orchestratorDetails(view, children), {});
  t.deepEqual(htmlTokens(doc), []);
  const [table] = tables(doc);
  t.deepEqual(cellText(table), [
    ['child', 'title', 'agent', 'status', 'in roster', 'turn ends'],
    ['fix-login', 'a|b <b>x</b>', 'coder', 'running', 'yes', '1'],
    ['docs', '# docs', 'coder', 'failed', 'no', '1'],
  ]);
  const codes = doc
    .flatMap((tk) => tk.children ?? [])
    .filter((c) => c.type === 'code_inline')
    .map((c) => c.content);
  t.true(codes.includes('session send <id> <task>'));
});

test('a team: the certificate and the result branch first, then the handoff receipts, the board and the members as tables', (t) => {
  const view: TeamStatusView = {
    teamId: 'tm',
    goal: 'ship <feature> | fast',
    status: 'delivered',
    outcome: 'delivered',
    outcomeBecause: [],
    generation: 1,
    workRevision: 7,
    readRevision: 7,
    members: [
      { memberId: 'planner', role: 'Planner', sessionId: 'tm-planner' },
      { memberId: 'implementer', role: 'Implementer', sessionId: 'tm-implementer' },
    ],
    planApproved: true,
    executions: [
      { executionId: 'e1', taskId: 'T1', memberId: 'planner', sessionId: 'tm-planner', state: 'handed_off' },
      { executionId: 'e2', taskId: 'T2', memberId: 'implementer', sessionId: 'tm-implementer', state: 'completed' },
    ],
    turns: [{ turn: 5, turnId: 'x', startRevision: 6, endRevision: 7, outcome: 'finished', modelCalls: 2, toolCalls: 1 }],
    replies: [],
    refusals: [],
    queuedMessages: 0,
    receipts: [
      {
        receiptId: 'r1',
        kind: 'reassign',
        oldTaskId: 'T1',
        newTaskId: 'T2',
        oldOwner: 'planner',
        newOwner: 'implementer',
        state: 'released',
        sloMissed: false,
        trail: ['requested', 'yielding', 'released'],
      },
    ],
    waiting: [],
    candidate: 'certified',
    certificate: {
      certificateId: 'cert-1',
      generation: 1,
      workRevision: 7,
      taskIds: ['T2'],
      outputIds: ['o2'],
      resultBranch: 'orchard/team/tm/result',
      resultHead: '0123456789abcdef',
    },
    summary: { certificateId: 'cert-1', turn: 5, text: 'Done <ok> | cert-1' },
  };
  const doc = md.parse(teamDetails(view, 5), {});
  t.deepEqual(htmlTokens(doc), []);
  const [receipts, board, members] = tables(doc).map(cellText);
  t.deepEqual(members, [
    ['member', 'role', 'session'],
    ['planner', 'Planner', 'tm-planner'],
    ['implementer', 'Implementer', 'tm-implementer'],
  ]);
  t.deepEqual(board, [
    ['task', 'member', 'session', 'state'],
    ['T1', 'planner', 'tm-planner', 'handed_off'],
    ['T2', 'implementer', 'tm-implementer', 'completed'],
  ]);
  t.deepEqual(receipts.slice(1), [['r1', 'reassign', 'T1 → T2', 'planner', 'implementer', 'released', 'no', 'requested → yielding → released', '']]);
  const paragraphs = doc.filter((tk) => tk.type === 'inline').map(shown);
  t.true(paragraphs.includes('certificate cert-1 · generation 1 · revision 7 · 1 task(s)'), paragraphs.join('\n'));
  t.true(paragraphs.includes('result branch orchard/team/tm/result at 0123456789ab'), paragraphs.join('\n'));
  t.true(paragraphs.includes('Done <ok> | cert-1'));
});

test('a task execution: the task, member and session as code, and why it did not start', (t) => {
  const input = { teamId: 'tm', taskId: 'T<1>', executionId: 'e', memberId: 'planner', role: 'Planner', sessionId: 'tm-planner', repo: '/r', host: 'h' };
  const doc = md.parse(executionDetails(input, 'not_started', 'refused: <stale> | generation'), {});
  t.deepEqual(htmlTokens(doc), []);
  t.deepEqual(doc.filter((tk) => tk.type === 'inline').map(shown), [
    'task T<1> → planner (session tm-planner): not_started',
    'reason: refused: <stale> | generation',
  ]);
});
