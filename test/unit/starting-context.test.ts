import test from 'ava';
import { createRequestProblem, createSessionProblem, MAX_CONTEXT_CHARS } from '../../contract/messages';
import { parseSessionCall } from '../../workflows/orchestrator/session-call';
import { ORCHESTRATOR_TOOLS } from '../../workflows/orchestrator/tools';

const create = (extra: Record<string, unknown>) => ({ operation: 'create', args: { title: 't', task: 'x', ...extra } });
const bound = { orchestratorId: 'fleet', executionId: 'e1', turnId: 'u1', turn: 2, step: 1 };

test('the session tool reads includeContext as the conversation, context as a handoff, and neither as independent', (t) => {
  const read = (extra: Record<string, unknown>) => {
    const parsed = parseSessionCall(create(extra));
    return parsed.ok && parsed.call.operation === 'create' ? parsed.call.context : parsed;
  };
  t.deepEqual(read({ includeContext: true }), { kind: 'conversation' });
  t.deepEqual(read({ context: 'we chose postgres' }), { kind: 'handoff', text: 'we chose postgres' });
  t.is(read({}), undefined);
  t.is(read({ includeContext: false }), undefined);
  // includeContext: false is not the conversation: with a handoff it is the handoff.
  t.deepEqual(read({ includeContext: false, context: 'h' }), { kind: 'handoff', text: 'h' });
});

test('includeContext: true with a context is refused context_conflict, and so is it flattened to the top level', (t) => {
  for (const call of [create({ includeContext: true, context: 'h' }), { operation: 'create', title: 't', task: 'x', includeContext: true, context: 'h' }]) {
    const parsed = parseSessionCall(call);
    t.false(parsed.ok);
    if (!parsed.ok) {
      t.is(parsed.code, 'context_conflict');
      t.regex(parsed.message, /nothing was created/);
    }
  }
});

test('a handoff over its cap is context_too_large; a blank one or a non-boolean includeContext is session_call_invalid', (t) => {
  const big = parseSessionCall(create({ context: 'x'.repeat(MAX_CONTEXT_CHARS + 1) }));
  t.like(big, { ok: false, code: 'context_too_large' });
  t.true(parseSessionCall(create({ context: 'x'.repeat(MAX_CONTEXT_CHARS) })).ok);
  t.like(parseSessionCall(create({ context: '  ' })), { ok: false, code: 'session_call_invalid' });
  t.like(parseSessionCall(create({ includeContext: 'yes' })), { ok: false, code: 'session_call_invalid' });
  // A dispatch accepted before a cap is read again without it (caps: false), never refused.
  t.true(parseSessionCall(create({ context: 'x'.repeat(MAX_CONTEXT_CHARS + 1) }), { caps: false }).ok);
});

test('the session tool schema offers includeContext and context on create', (t) => {
  const args = (ORCHESTRATOR_TOOLS.find((tool) => tool.name === 'session')!.parameters as any).properties.args;
  t.is(args.properties.includeContext.type, 'boolean');
  t.is(args.properties.context.type, 'string');
});

test('the contract refuses both kinds of starting context with context_conflict, for a client create and the create update', (t) => {
  const session = { sessionId: 's1', title: 't', repo: '/r', host: 'h', parent: 'orchestrator/fleet' };
  t.is(createSessionProblem({ ...session, context: 'h', parentConversation: bound })?.code, 'context_conflict');
  t.is(createRequestProblem({ requestId: 'r', from: 'orchestrator/fleet', context: 'h', parentConversation: bound })?.code, 'context_conflict');
  t.is(createSessionProblem({ ...session, context: 'h' }), undefined);
  t.is(createSessionProblem({ ...session, parentConversation: bound }), undefined);
  t.is(createSessionProblem({ ...session, context: 'x'.repeat(MAX_CONTEXT_CHARS + 1) })?.code, 'context_too_large');
  t.is(createRequestProblem({ requestId: 'r', context: '' })?.code, 'invalid_input');
});

test("only the parent's own conversation can be included: another orchestrator's, or none without a parent, is invalid_input", (t) => {
  const session = { sessionId: 's1', title: 't', repo: '/r', host: 'h' };
  t.is(createSessionProblem({ ...session, parent: 'orchestrator/other', parentConversation: bound })?.code, 'invalid_input');
  t.is(createSessionProblem({ ...session, parentConversation: bound })?.code, 'invalid_input');
  t.is(createRequestProblem({ requestId: 'r', from: 'orchestrator/fleet', parentConversation: { ...bound, step: 0 } })?.code, 'invalid_input');
});
