/**
 * Who may do what to a team's board (invariant 12), as data: one table the Coordinator's tool schema, the tool
 * executor and the Postgres store all read, so the three enforcement points cannot drift apart. A direct
 * allowlist: an operation or tool not listed for an actor is refused, whatever it is called.
 */

/** Who a write is attributed to. A Coordinator write names its turn; a Member's names its task execution. */
export type Actor =
  | { readonly kind: 'coordinator'; readonly turnId: string }
  | { readonly kind: 'member'; readonly memberId: string; readonly executionId: string }
  | { readonly kind: 'user'; readonly eventId: string }
  | { readonly kind: 'system' };

/** Every write the team store knows. */
const STORE_OPERATIONS = [
  'task_create',
  'task_assign',
  'task_update',
  'task_cancel',
  'plan_approve',
  'task_start',
  'task_output',
  'task_fail',
  'inbox_message',
  'inbox_read',
  'coordinator_message',
  'user_event',
  'handoff',
  'certificate',
  'activate',
] as const;
export type StoreOperation = (typeof STORE_OPERATIONS)[number];

/** The writes each kind of actor may make. Graph administration and coordination for the Coordinator; evidence only from a Member's execution. */
const STORE_ALLOWLIST: Readonly<Record<Actor['kind'], readonly StoreOperation[]>> = {
  coordinator: ['task_create', 'task_assign', 'task_update', 'task_cancel', 'plan_approve', 'coordinator_message', 'inbox_read', 'certificate'],
  member: ['task_output', 'task_fail', 'inbox_message'],
  user: ['user_event', 'task_cancel', 'handoff'],
  system: ['task_start', 'task_fail', 'handoff', 'task_create', 'task_assign', 'activate'],
};

export function actorLabel(actor: Actor): string {
  switch (actor.kind) {
    case 'coordinator':
      return `coordinator:${actor.turnId}`;
    case 'member':
      return `member:${actor.memberId}:${actor.executionId}`;
    case 'user':
      return `user:${actor.eventId}`;
    case 'system':
      return 'system';
  }
}

/** Why `actor` may not make this write, or undefined when it may. */
export function storeRefusal(actor: Actor, operation: StoreOperation): string | undefined {
  if (STORE_ALLOWLIST[actor.kind].includes(operation)) return undefined;
  return `${operation} is not a write a ${actor.kind} may make (attributed to ${actorLabel(actor)})`;
}

/** The Coordinator's tools (invariant 12): bounded reads, task graph admin, plan approval, formal coordination, user reply, completion. */
export const COORDINATOR_TOOL_NAMES = [
  'task_list',
  'task_get',
  'task_create',
  'task_assign',
  'task_update',
  'plan_approve',
  'org_send_message',
  'user_reply',
  'org_run_complete',
] as const;
export type CoordinatorToolName = (typeof COORDINATOR_TOOL_NAMES)[number];

export const isCoordinatorTool = (name: string): name is CoordinatorToolName => (COORDINATOR_TOOL_NAMES as readonly string[]).includes(name);

/** Purposes a Member's message to the Coordinator may have (invariant 16). */
export const MEMBER_MESSAGE_PURPOSES = ['blocker', 'decision_required', 'material_change', 'risk', 'requested_reply'] as const;
