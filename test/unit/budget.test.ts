import test from 'ava';
import fc from 'fast-check';
import { defaultBudgetFromEnv } from '../../activities/limits';
import { requestJsonBytes, reservationOf } from '../../activities/model/reservation';
import type { ChatMessage } from '../../activities/model/types';
import { TOOL_PROFILES } from '../../workflows/tools';
import { budgetTokensProblem, setBudgetProblem } from '../../contract/messages';
import { Budget, DEFAULT_CHILD_SHARE } from '../../workflows/budget';

test('a parent holds each open child budget whole, counts what children spent, and gets the unspent escrow back when one closes', (t) => {
  const parent = new Budget({ limit: 1000, spent: 0 });
  parent.settle({ usage: { charged: 100 } }, 'x');
  t.deepEqual(parent.carve('a', 400), { limit: 400, funded: true });
  t.deepEqual(parent.view(true), { limit: 1000, spent: 100, escrowed: 400, remaining: 500 });
  parent.childReported({ childId: 'a', budget: { limit: 400, spent: 150 } });
  t.deepEqual(parent.view(true), { limit: 1000, spent: 250, escrowed: 250, remaining: 500 }, 'spend moves from escrow to spent');
  parent.childReported({ childId: 'a', closed: true, budget: { limit: 400, spent: 160 } });
  t.deepEqual(parent.view(true), { limit: 1000, spent: 260, escrowed: 0, remaining: 740 }, 'the unspent 240 came back');
  // The fold survives continue-as-new.
  t.deepEqual(new Budget(JSON.parse(JSON.stringify(parent.carry()))).view(true), parent.view(true));
});

test('a child the parent cannot fund is refused budget_insufficient and nothing is carved; the default share is a quarter of what remains', (t) => {
  const parent = new Budget({ limit: 1000, spent: 0 });
  const refused = parent.carve('big', 1001);
  t.is('code' in refused && refused.code, 'budget_insufficient');
  t.is(parent.view(true).escrowed, 0);
  t.deepEqual(parent.carve('d'), { limit: Math.floor(1000 / DEFAULT_CHILD_SHARE), funded: true });
  const tiny = new Budget({ limit: 3, spent: 0 });
  t.is('code' in tiny.carve('d') && 'refused', 'refused', 'a share of 0 tokens is no budget');
  t.deepEqual(new Budget({ spent: 0 }).carve('free', 500), { limit: 500, funded: false }, "an unbudgeted parent carves nothing: the child's budget is its own");
});

test("a child's raise is carved from what its parent has left; a carved budget never shrinks; a repeat changes nothing", (t) => {
  const parent = new Budget({ limit: 1000, spent: 0 });
  parent.carve('a', 300);
  t.is(parent.fundProblem('a', 1200)?.code, 'budget_insufficient');
  t.is(parent.fundProblem('a', 200)?.code, 'invalid_input');
  t.is(parent.fundProblem('nobody', 400)?.code, 'session_not_found');
  t.is(parent.fundProblem('a', 1000), undefined);
  parent.fund('a', 1000);
  t.deepEqual(parent.view(true), { limit: 1000, spent: 0, escrowed: 1000, remaining: 0 });
  const child = new Budget({ limit: 300, spent: 50, fundedBy: 'orchestrator/o' });
  t.is(child.setProblem(200)?.code, 'invalid_input', 'a carved budget only grows');
  t.is(child.setProblem(40)?.code, 'invalid_input', 'never below what was spent');
  t.is(new Budget({ limit: 300, spent: 50 }).setProblem(100), undefined, 'an own budget may be lowered to what was spent');
});

test('a refused call marks the budget exhausted until its limit is set again', (t) => {
  const budget = new Budget({ limit: 100, spent: 0 });
  t.deepEqual(budget.forCall(10), { budget: { remaining: 100, maxOutputTokens: 10 } });
  t.is(budget.settle({ refused: { reserved: 200, remaining: 100 } }, 'more')?.code, 'budget_exhausted');
  t.true(budget.view().exhausted);
  budget.setLimit(500);
  t.falsy(budget.view().exhausted);
  t.deepEqual(new Budget({ spent: 7 }).forCall(10), {}, 'no limit, no reservation check');
});

test('a reservation bounds the request: its UTF-8 bytes, a template allowance per message and tool, and the output cap', (t) => {
  const messages = [
    { role: 'system' as const, content: 'x'.repeat(1000) },
    { role: 'user' as const, content: 'é'.repeat(100) },
  ];
  const small = reservationOf({ messages, tools: [] }, 0);
  t.true(small >= Buffer.byteLength(JSON.stringify(messages)));
  t.is(reservationOf({ messages, tools: [] }, 500), small + 500);
  t.true(reservationOf({ messages: [...messages, { role: 'user', content: 'more' }], tools: [] }, 0) > small);
});

test("a request's bytes, summed message by message (each measured once), are its whole JSON's, whatever the text", (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 40 });
  const message: fc.Arbitrary<ChatMessage> = fc.oneof(
    fc.record({ role: fc.constantFrom('system' as const, 'user' as const), content: text }),
    fc.record({ role: fc.constant('tool' as const), tool_call_id: text, content: text }),
    fc.record({
      role: fc.constant('assistant' as const),
      content: fc.option(text),
      tool_calls: fc.array(fc.record({ id: text, type: fc.constant('function' as const), function: fc.record({ name: text, arguments: text }) }), {
        maxLength: 3,
      }),
    }),
  );
  const profiles = Object.values(TOOL_PROFILES);
  fc.assert(
    fc.property(fc.array(message, { maxLength: 8 }), fc.nat(8), fc.nat(profiles.length - 1), (fresh, repeats, p) => {
      // The same objects again (as an earlier turn's cached messages are on every later call), and new ones.
      const messages = [...fresh, ...fresh.slice(0, repeats)];
      const tools = profiles[p];
      const whole = Buffer.byteLength(JSON.stringify({ messages, tools }), 'utf8');
      return requestJsonBytes({ messages, tools }) === whole && requestJsonBytes({ messages, tools }) === whole;
    }),
  );
  t.is(requestJsonBytes({ messages: [], tools: [] }), Buffer.byteLength(JSON.stringify({ messages: [], tools: [] })));
});

test('budgets are positive integers of tokens; setBudget needs a request id', (t) => {
  t.is(budgetTokensProblem(undefined), undefined);
  for (const bad of [0, -1, 1.5, '100', Number.MAX_SAFE_INTEGER + 1]) t.is(budgetTokensProblem(bad)?.code, 'invalid_input', String(bad));
  t.is(setBudgetProblem({ limit: 100 })?.code, 'invalid_input');
  t.is(setBudgetProblem({ limit: 100, requestId: 'r' }), undefined);
});

test('ORCHARD_DEFAULT_BUDGET_TOKENS: unset is no budget, a bad value stops the worker', (t) => {
  t.is(defaultBudgetFromEnv({}), undefined);
  t.is(defaultBudgetFromEnv({ ORCHARD_DEFAULT_BUDGET_TOKENS: '50000' }), 50000);
  t.throws(() => defaultBudgetFromEnv({ ORCHARD_DEFAULT_BUDGET_TOKENS: 'lots' }), { message: /ORCHARD_DEFAULT_BUDGET_TOKENS=lots/ });
});
