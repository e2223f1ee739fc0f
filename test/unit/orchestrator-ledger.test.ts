import test from 'ava';
import fc from 'fast-check';
import type { ChildTurnEnded } from '../../contract/messages';
import { agentRows, UNTRUSTED } from '../../workflows/orchestrator/agents';
import {
  MAX_ROUTING_ALIAS_CHARS,
  MAX_ROUTING_ALIASES,
  MAX_ROUTING_DESCRIPTION_CHARS,
  ROUTING_CAPS_BEFORE_ISSUE_18,
  parseDescriptionCall,
  sameChange,
} from '../../workflows/orchestrator/descriptions';
import { Ledger, type LedgerChild } from '../../workflows/orchestrator/ledger';

function child(childId: string, extra: Partial<LedgerChild> = {}): Omit<LedgerChild, 'turnEnds' | 'lastActivity'> {
  return { childId, title: childId, agent: 'coder', routingAliases: [], status: 'running', provenance: { turn: 1, callId: 'c' }, ...extra };
}
const ended = (childId: string, turnId: string, extra: Partial<ChildTurnEnded> = {}): ChildTurnEnded => ({
  childId,
  turnId,
  taskId: 't1',
  outcome: 'finished',
  queued: 0,
  ...extra,
});

test('an each child: every new turn end is a result; a redelivered one changes nothing', (t) => {
  const ledger = new Ledger();
  ledger.add(child('a'));
  t.deepEqual(ledger.turnEnded(ended('a', 'x')), [{ kind: 'each', notice: ended('a', 'x') }]);
  t.is(ledger.turnEnded(ended('a', 'x')), undefined);
  t.is(ledger.get('a')?.turnEnds, 1);
  t.is(ledger.get('a')?.status, 'idle');
  // A turn end of a child the ledger does not hold is not counted (and not remembered as seen).
  t.is(ledger.turnEnded(ended('ghost', 'y')), undefined);
  ledger.add(child('ghost'));
  t.truthy(ledger.turnEnded(ended('ghost', 'y')));
});

test('a group is delivered once, when sealed and every member is terminal, whatever the order', (t) => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 0, maxLength: 3 }), fc.integer({ min: 0, max: 3 }), (order, sealAt) => {
      const ledger = new Ledger();
      const members = ['m1', 'm2', 'm3'];
      for (const m of members) {
        ledger.add(child(m, { completion: { policy: 'group', groupId: 'g' } }));
        ledger.joinGroup('g', m, 1);
      }
      const delivered: unknown[] = [];
      const events: (string | 'seal')[] = [...members];
      events.splice(Math.min(sealAt, events.length), 0, 'seal');
      // Shuffle member events deterministically by `order`.
      for (const [i, k] of order.entries()) {
        const a = events.indexOf(members[i % 3]);
        const b = Math.min(k, events.length - 1);
        [events[a], events[b]] = [events[b], events[a]];
      }
      for (const e of events) {
        const ready = e === 'seal' ? ledger.sealGroups() : (ledger.turnEnded(ended(e, `turn-${e}`)) ?? []);
        delivered.push(...ready);
      }
      if (delivered.length !== 1) return false;
      const group = delivered[0] as { kind: string; notices: ChildTurnEnded[] };
      return (
        group.kind === 'group' &&
        group.notices
          .map((n) => n.childId)
          .sort()
          .join() === members.join()
      );
    }),
  );
  t.pass();
});

test('a running member (more queued) is not terminal; a sealed group refuses late members', (t) => {
  const ledger = new Ledger();
  for (const m of ['a', 'b']) {
    ledger.add(child(m));
    ledger.joinGroup('g', m, 3);
  }
  t.is(ledger.groupRefusal('g'), undefined, 'open while its turn runs');
  t.deepEqual(ledger.sealGroups(), []);
  t.regex(ledger.groupRefusal('g') ?? '', /sealed when turn 3 settled/);
  t.deepEqual(ledger.turnEnded(ended('a', '1')), []);
  t.deepEqual(ledger.turnEnded(ended('b', '1', { queued: 1 })), [], 'b still has work');
  const done = ledger.turnEnded(ended('b', '2'));
  t.is(done?.length, 1);
  // After delivery the members report each turn end on their own.
  t.deepEqual(ledger.turnEnded(ended('a', '9')), [{ kind: 'each', notice: ended('a', '9') }]);
  // A creation that failed is taken back out of its group; an emptied group disappears.
  ledger.add(child('c'));
  ledger.joinGroup('h', 'c', 4);
  ledger.remove('c');
  t.false(ledger.groups.some((g) => g.groupId === 'h'));
});

test('a proposal applies only after a later user message carried its token, and only once', (t) => {
  const ledger = new Ledger();
  ledger.add(child('a', { routingDescription: 'old' }));
  ledger.propose({ token: 'confirm-1', childId: 'a', change: { routingAliases: ['pr-9'] }, afterSeq: 5 });
  ledger.userSaid('confirm-1', 4, 'm4');
  t.is(ledger.proposals[0].confirmedBy, undefined, 'a message from before the proposal does not count');
  ledger.userSaid('yes, confirm-1 please', 5, 'm5');
  t.is(ledger.proposals[0].confirmedBy, 'm5');
  ledger.applyProposal('confirm-1');
  t.deepEqual(ledger.get('a')?.routingAliases, ['pr-9']);
  t.is(ledger.get('a')?.routingDescription, 'old');
  t.deepEqual(ledger.proposals, []);
});

test('description calls: typed refusals; a confirmation must name the proposed change', (t) => {
  t.like(parseDescriptionCall({ sessionID: 'a', confirmed: false }), { ok: false, code: 'description_call_invalid' });
  t.like(parseDescriptionCall({ sessionID: 'a', routingAliases: 'x', confirmed: false }), { ok: false });
  t.like(parseDescriptionCall({ routingDescription: 'x', confirmed: false }), { ok: false });
  t.like(parseDescriptionCall({ sessionID: 'a', routingDescription: 'x', confirmed: 'yes' }), { ok: false });
  t.like(parseDescriptionCall({ sessionID: 'a', routingDescription: 'x', confirmed: false }), { ok: true, change: { routingDescription: 'x' } });
  t.true(sameChange({ routingDescription: 'x', routingAliases: ['a'] }, {}));
  t.true(sameChange({ routingDescription: 'x', routingAliases: ['a'] }, { routingAliases: ['a'] }));
  t.false(sameChange({ routingDescription: 'x' }, { routingDescription: 'y' }));
  t.false(sameChange({ routingAliases: ['a'] }, { routingAliases: ['a', 'b'] }));
});

test('description calls: routing metadata over its caps is refused invalid_input, never cut short', (t) => {
  const call = (extra: Record<string, unknown>) => parseDescriptionCall({ sessionID: 'a', confirmed: false, ...extra });
  const atCap = {
    routingDescription: 'd'.repeat(MAX_ROUTING_DESCRIPTION_CHARS),
    routingAliases: Array.from({ length: MAX_ROUTING_ALIASES }, (_, i) => `${i}`.padEnd(MAX_ROUTING_ALIAS_CHARS, 'x')),
  };
  t.like(call(atCap), { ok: true, change: atCap });
  const over: [Record<string, unknown>, RegExp][] = [
    [{ routingDescription: 'd'.repeat(MAX_ROUTING_DESCRIPTION_CHARS + 1) }, /^routingDescription is \d+ bytes[^;]*; the limit is \d+/],
    [{ routingAliases: Array.from({ length: MAX_ROUTING_ALIASES + 1 }, (_, i) => `a${i}`) }, /^routingAliases has \d+ aliases; the limit is \d+/],
    [{ routingAliases: ['x'.repeat(MAX_ROUTING_ALIAS_CHARS + 1)] }, /^routingAliases\[0\] is \d+ bytes[^;]*; the limit is \d+/],
  ];
  for (const [extra, why] of over) {
    const parsed = call(extra);
    t.like(parsed, { ok: false, code: 'invalid_input' }, JSON.stringify(extra).slice(0, 80));
    if (!parsed.ok) {
      t.regex(parsed.message, why);
      t.regex(parsed.message, /; nothing was changed$/);
    }
  }
  // A confirmation is parsed with the same caps, so it can never name more than a proposal could.
  t.like(parseDescriptionCall({ sessionID: 'a', confirmed: true, confirmationToken: 'c', routingDescription: 'd'.repeat(MAX_ROUTING_DESCRIPTION_CHARS + 1) }), {
    ok: false,
  });
  // Workflow tasks recorded before the caps are parsed with the caps they had.
  t.like(parseDescriptionCall({ sessionID: 'a', confirmed: false, routingDescription: 'd'.repeat(2_000) }, ROUTING_CAPS_BEFORE_ISSUE_18), { ok: true });
  t.like(parseDescriptionCall({ sessionID: 'a', confirmed: false, routingDescription: 'd'.repeat(2_001) }, ROUTING_CAPS_BEFORE_ISSUE_18), { ok: false });
});

test('agents: only the ledger makes a child actionable; a cache row without authority is untrusted', (t) => {
  const ledger = new Ledger();
  ledger.add(child('live'));
  ledger.add(child('gone'));
  ledger.add(child('broke', { status: 'failed' }));
  ledger.add(child('asked'));
  const rows = agentRows(
    ledger.children,
    [
      { childId: 'live', liveness: 'alive', runtime: 'r1' },
      { childId: 'gone', liveness: 'dead', runtime: 'r2' },
      { childId: 'broke', liveness: 'dead', runtime: 'r3' },
      { childId: 'asked', liveness: 'unknown', runtime: 'r4' },
      { childId: 'intruder', liveness: 'alive', runtime: 'r5' },
    ],
    [
      { childId: 'live', title: 'tampered', agent: 'x', routingAliases: ['evil'], status: 'idle' },
      { childId: 'intruder', title: 'claims PR 1741', agent: 'coder', routingAliases: [], status: 'idle' },
    ],
  );
  const by = Object.fromEntries(rows.map((r) => [r.childId, r]));
  t.like(by.live, { title: 'live', routingAliases: [], actionable: true, stale: false, attachable: true, reason: null });
  t.like(by.gone, { actionable: false, stale: true, attachable: false, reason: 'child_workflow_closed' });
  t.like(by.broke, { actionable: false, stale: false, reason: 'child_failed' });
  t.like(by.asked, { actionable: false, stale: true, reason: 'liveness_unknown' });
  t.like(by.intruder, { actionable: false, attachable: true, reason: UNTRUSTED });
  t.is(rows.length, 5);
});
