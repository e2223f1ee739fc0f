import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { validateClosure } from '../../workflows/team/closure';
import { runOrchard } from '../helpers/cli-process';

const BOARDS = join(__dirname, '../fixtures/boards');

/** Runs the real CLI from the fixtures directory (relative paths resolve there); it needs no Temporal and no database. */
const orchard = (args: string[]) =>
  runOrchard(args, { TEMPORAL_ADDRESS: '127.0.0.1:1', DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' }, { cwd: BOARDS, timeoutMs: 60_000 });

test('a delivered board: exit 0, the outcome, no reasons and how each task counts', async (t) => {
  const r = await orchard(['board', 'check', 'delivered.json']);
  t.is(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  t.is(lines[0], 'outcome: delivered (candidate: ready)');
  t.is(lines[1], 'reasons: none');
  t.true(lines.includes('  impl: replaced_by impl-2'), r.stdout);
  t.true(lines.includes('  bench: user_scope_removed (user event ue-7)'), r.stdout);
  t.true(lines.includes('  plan: completed'), r.stdout);
});

test('--json prints the same result the validator gives the workflow', async (t) => {
  const r = await orchard(['board', 'check', join(BOARDS, 'delivered.json'), '--json']);
  t.is(r.code, 0, r.stderr);
  const printed = JSON.parse(r.stdout);
  t.like(printed, { outcome: 'delivered', reasons: [] });
  t.deepEqual(printed, validateClosure(JSON.parse(readFileSync(join(BOARDS, 'delivered.json'), 'utf8'))));
});

test('a board whose every task users removed ends cancelled with exit 0', async (t) => {
  const text = await orchard(['board', 'check', 'all-cancelled.json']);
  t.is(text.code, 0, text.stderr);
  t.regex(text.stdout, /^outcome: cancelled \(candidate: blocked\)$/m);
  t.regex(text.stdout, /^ {2}all_cancelled: /m);

  const json = await orchard(['board', 'check', 'all-cancelled.json', '--json']);
  t.is(json.code, 0, json.stderr);
  const { outcome, reasons } = JSON.parse(json.stdout);
  t.is(outcome, 'cancelled');
  t.deepEqual(
    reasons.map((x: { code: string }) => x.code),
    ['all_cancelled'],
  );
});

test("a board the Coordinator cancelled is not the user's abandonment: not_delivered, with why", async (t) => {
  const json = await orchard(['board', 'check', 'coordinator-cancelled.json', '--json']);
  t.is(json.code, 0, json.stderr);
  const { outcome, reasons } = JSON.parse(json.stdout);
  t.is(outcome, 'not_delivered');
  t.deepEqual(
    reasons.map((x: { code: string }) => x.code),
    ['all_cancelled', 'cancelled_by_coordinator'],
  );
});

test('a board with stale evidence, a timed-out handoff and a foreign user event is not delivered, exit 0, with each reason', async (t) => {
  const r = await orchard(['board', 'check', 'not-delivered.json', '--json']);
  t.is(r.code, 0, r.stderr);
  const { outcome, reasons } = JSON.parse(r.stdout);
  t.is(outcome, 'not_delivered');
  t.deepEqual(
    reasons.map((x: { code: string; taskId?: string }) => [x.code, x.taskId]),
    [
      ['handoff_pending', 'impl-2'],
      ['stale_evidence', 'plan'],
      ['user_event_foreign', 'bench'],
    ],
  );
});

test('a malformed board file exits 2 with one typed line naming the JSON path at fault', async (t) => {
  for (const args of [
    ['board', 'check', 'malformed.json'],
    ['board', 'check', 'malformed.json', '--json'],
  ]) {
    const r = await orchard(args);
    t.is(r.code, 2);
    // With --json the failure is one JSON object on stdout ({error: {code, message}}); without, one line on stderr.
    const json = args.includes('--json');
    t.is(json ? r.stderr : r.stdout, '');
    const lines = (json ? r.stdout : r.stderr).trim().split('\n');
    t.is(lines.length, 1, r.stdout + r.stderr);
    const line = json
      ? `orchard: ${(JSON.parse(lines[0]) as { error: { code: string; message: string } }).error.code}: ${(JSON.parse(lines[0]) as { error: { message: string } }).error.message}`
      : lines[0];
    t.regex(line, /^orchard: board_file_invalid: board file .*malformed\.json is malformed at tasks\[2\]\.status: /);
  }
});

test('a board file that does not exist exits 2 as board_file_invalid', async (t) => {
  const r = await orchard(['board', 'check', 'no-such-board.json']);
  t.is(r.code, 2);
  t.regex(r.stderr, /^orchard: board_file_invalid: cannot read board file .*no-such-board\.json/);
});
