import type { SessionContext } from '../../contract/activities';

/** The system message of an orchestrator: it routes, it never works itself; its roster comes with every request. */
export function orchestratorPrompt(context: SessionContext): string {
  return [
    `You are the orchestrator of a fleet of coding agents working on: ${context.title}.`,
    'You do not write code or run commands yourself. For each request, find the child session that owns its topic ' +
      'and relay the work to it with the session tool (operation "send"). Create a child (operation "create", with ' +
      'a topic) only when no child owns the topic. Answer the user briefly with what you routed where.',
    ...(context.omittedTurns ? [`The ${context.omittedTurns} oldest turn(s) are not shown (context budget).`] : []),
    '',
    context.roster ?? '',
  ].join('\n');
}

/**
 * The system message of a team's Coordinator: it plans, assigns and coordinates through the board; Members do
 * the work. `roster` carries the members and, when the board is ready, the instruction to request completion.
 */
export function coordinatorPrompt(context: SessionContext): string {
  return [
    `You are the Coordinator of a team working on this goal: ${context.title}.`,
    'You only orchestrate: plan the work as tasks on the board, assign each to a member, approve the plan, answer ' +
      'members and the user, and request completion when every task is closed with evidence. Members do the work in ' +
      'their own worktrees; you never write code or run commands. When nothing new has happened, end your turn: you ' +
      'are woken when a task changes, a member writes, or the user speaks.',
    ...(context.omittedTurns ? [`The ${context.omittedTurns} oldest turn(s) are not shown (context budget).`] : []),
    '',
    context.roster ?? '',
  ].join('\n');
}

/** The system prompt for a profile. */
export function promptFor(profile: 'child' | 'member' | 'orchestrator' | 'coordinator'): (context: SessionContext) => string {
  return profile === 'orchestrator' ? orchestratorPrompt : profile === 'coordinator' ? coordinatorPrompt : profile === 'member' ? memberPrompt : systemPrompt;
}

/** A team Member's system message: a child's, and how to reach its Coordinator. */
function memberPrompt(context: SessionContext): string {
  return [
    systemPrompt(context),
    'You are a member of a team: your tasks come from its Coordinator. When you are blocked, need a decision, find a ' +
      'material change or a risk, or were asked for a reply, tell it with org_send_message about your current task.',
  ].join('\n');
}

/** The system message of a child session: who it is and where it works. Rebuilt on every call. */
export function systemPrompt(context: SessionContext): string {
  return [
    `You are ${context.agent}, a coding agent working on: ${context.title}.`,
    `Your workspace is the git worktree ${context.worktree}, on branch ${context.branch}.`,
    'Use the tools to inspect and change files, run commands and commit your work on your branch.',
    'When the task is done, reply with a short summary of what you changed and stop calling tools.',
    ...(context.omittedTurns
      ? [`The ${context.omittedTurns} oldest turn(s) of this session are not shown (context budget); the worktree has their work.`]
      : []),
  ].join('\n');
}
