import { readFile, stat } from 'node:fs/promises';
import { extname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { coordinatorProblems } from './coordinator';
import { routerProblems } from './router';
import { describeIssues, ModelError } from './types';

/**
 * A scenario scripts what the `scripted` provider answers, turn by turn and step by step. The format is
 * documented in `scenarios/FORMAT.md`; this schema is its single definition.
 */

const scriptedToolCall = z.strictObject({
  name: z.string().min(1),
  // A string is sent verbatim, so a scenario can hand the tool executor arguments that are not valid JSON.
  arguments: z.union([z.record(z.string(), z.unknown()), z.string()]).default({}),
});

const scriptedStep = z
  .strictObject({
    content: z.string().optional(),
    tool_calls: z.array(scriptedToolCall).min(1).optional(),
    // Replayed for every later step of the turn, so a step limit can be reached without a long script.
    repeat: z.boolean().optional(),
  })
  .refine((step) => step.content !== undefined || step.tool_calls !== undefined, {
    message: 'a step needs `content`, `tool_calls`, or both',
  });

const turnExpectation = z.strictObject({
  /** Each must occur in the turn's task (the last user message). */
  taskIncludes: z.array(z.string().min(1)).optional(),
  /** Each must occur somewhere in the request's messages: proves earlier turns' history was carried. */
  historyIncludes: z.array(z.string().min(1)).optional(),
});

const scriptedTurn = z
  .strictObject({
    steps: z.array(scriptedStep).min(1),
    expect: turnExpectation.optional(),
    /**
     * Values read from the turn's task: each name is bound to the first match of its regular expression (its first
     * group when it has one) and `{{name}}` in the steps is replaced by it; no match fails the turn.
     */
    bind: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'a name of letters, digits and _'), z.string().min(1)).optional(),
    // Only on the last turn: it answers every later turn too (for long-running sessions in tests).
    repeat: z.boolean().optional(),
  })
  .superRefine((turn, ctx) => {
    turn.steps.forEach((step, i) => {
      if (step.repeat && i !== turn.steps.length - 1) {
        ctx.addIssue({ code: 'custom', path: ['steps', i, 'repeat'], message: 'only the last step may repeat' });
      }
    });
    for (const [name, pattern] of Object.entries(turn.bind ?? {})) {
      try {
        new RegExp(pattern);
      } catch (err) {
        ctx.addIssue({ code: 'custom', path: ['bind', name], message: `not a regular expression: ${err instanceof Error ? err.message : String(err)}` });
      }
    }
  });

/** A session's turns: only the last may repeat. */
const scriptedTurns = z
  .array(scriptedTurn)
  .min(1)
  .superRefine((turns, ctx) => {
    turns.forEach((turn, i) => {
      if (turn.repeat && i !== turns.length - 1) {
        ctx.addIssue({ code: 'custom', path: [i, 'repeat'], message: 'only the last turn may repeat' });
      }
    });
  });

/** One topic the scripted orchestrator can recognise (see `router` in scenarios/FORMAT.md). */
const routerTopic = z.strictObject({
  /** The title of the child it creates for this topic; a roster row is this topic's owner when its title is about it. */
  title: z.string().min(1),
  /** The `topic` of that create call. */
  topic: z.string().min(1),
  /** Words and phrases that mean this topic, matched case-insensitively as whole words: synonyms make paraphrases land. */
  keywords: z.array(z.string().min(1)).min(1),
});

/**
 * A scripted orchestrator policy: it answers requests that offer the `session` tool from the request alone (the
 * roster rows in the system message, the last message), so routing is decided by the same bytes a real model
 * would get. Requests without that tool (children) are answered from `turns`.
 */
const routerSchema = z.strictObject({
  topics: z.array(routerTopic).min(1),
  /** User messages that begin with one of these are reports (the workflow's manifest of child results), not requests. */
  notices: z.array(z.string().min(1)).default(['Child results']),
  /** The final text after a tool result; `{{result}}` is the first line of that result. */
  reply: z.string().min(1).default('Routed: {{result}}'),
  /** The answer to a notice, or to a message about none of the topics. */
  unrouted: z.string().min(1).default('Nothing to route.'),
});

/**
 * A scripted Coordinator policy: it answers requests that offer the `task_list` tool (a team's Coordinator) from
 * the request alone (the member rows in the system message, the last user message, the tool results since).
 */
const coordinatorSchema = z.strictObject({
  /** The plan it creates on the goal, in order. */
  tasks: z
    .array(
      z.strictObject({
        taskId: z.string().regex(/^[a-z][a-z0-9-]{0,39}$/, 'lowercase letters, digits and "-", at most 40'),
        title: z.string().min(1),
        /** `{{session:<member>}}` is that member's session id as the request lists it (its branch is `orchard/<session>`). */
        description: z.string().min(1),
        owner: z.string().min(1),
        /** Created unassigned with the plan; assigned to `owner` when a wake reports this task completed. */
        after: z.string().min(1).optional(),
      }),
    )
    .min(1),
  completion: z.string().min(1).default('Every planned task is completed with evidence.'),
  summary: z.string().min(1).default('Delivered: certificate {{certificate}}.'),
  reply: z.string().min(1).default('Done: {{result}}'),
  waiting: z.string().min(1).default('Nothing to do until a member reports.'),
  /** A user message containing one of these (case-insensitive) is answered with `org_run_complete`, ready or not. */
  completeOn: z.array(z.string().min(1)).optional(),
  /** Created (with its owner) when `org_run_complete` is refused `verification_failed`: the fix, once. */
  onVerificationFailed: z
    .strictObject({
      taskId: z.string().regex(/^[a-z][a-z0-9-]{0,39}$/, 'lowercase letters, digits and "-", at most 40'),
      title: z.string().min(1),
      description: z.string().min(1),
      owner: z.string().min(1),
    })
    .optional(),
});

/** A message a driver (`orchard demo`) sends, and the topic it is about; never read by the provider. */
const scenarioMessage = z.strictObject({
  text: z.string().min(1),
  /** The `topic` of the router topic that owns it: the demo checks the message was delivered to that topic's child. */
  topic: z.string().min(1),
});

const worktreeLog = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'a relative path inside the worktree');

/**
 * What a team demo's driver does as the user while the run goes on; never read by the provider. Each action
 * waits until `taskId`'s execution has written `lines` lines to `log` (a path in its worktree), then:
 * `reassign` (`orchard demo team`) reassigns that task to `to` with `reason`, and the check compares that log
 * with the new owner's; `cancelAll` (`orchard demo team-all-cancelled`) cancels every task of the board with
 * `reason`, waits for the cancelled executions to be released, and sends `message` to the Coordinator.
 */
const teamDriver = z.strictObject({
  reassign: z
    .strictObject({
      taskId: z.string().min(1),
      to: z.string().min(1),
      reason: z.string().min(1),
      log: worktreeLog,
      lines: z.number().int().min(1).default(5),
    })
    .optional(),
  cancelAll: z
    .strictObject({
      taskId: z.string().min(1),
      log: worktreeLog,
      lines: z.number().int().min(1).default(5),
      reason: z.string().min(1),
      message: z.string().min(1),
    })
    .optional(),
  /** `orchard demo team`: pause the team with `reason` while `taskId` writes, wait until it is paused, resume it. */
  pause: z
    .strictObject({
      taskId: z.string().min(1),
      log: worktreeLog,
      lines: z.number().int().min(1).default(5),
      reason: z.string().min(1),
    })
    .optional(),
  /** `orchard demo team`: the team's goal (the Coordinator's first message) instead of the poker evaluator's. */
  goal: z.string().min(1).optional(),
  /** `orchard demo team`: start the team with this verify command; `failsFirst`: the check expects a failed run before the passing one. */
  verify: z.strictObject({ command: z.string().min(1), timeoutMs: z.number().int().min(1000).optional(), failsFirst: z.boolean().default(false) }).optional(),
});

const scenarioSchema = z
  .strictObject({
    name: z.string().min(1),
    description: z.string().optional(),
    /** Reported as the answering model; `scripted-<name>` when absent. */
    model: z.string().min(1).optional(),
    /** Every session's turns; with `members`, the turns of a session whose agent is not listed there. */
    turns: scriptedTurns.optional(),
    /** Turns per agent (a member's role lower-cased, as its system message names it: `You are <agent>, …`). */
    members: z.record(z.string().min(1), scriptedTurns).optional(),
    router: routerSchema.optional(),
    coordinator: coordinatorSchema.optional(),
    messages: z.array(scenarioMessage).optional(),
    driver: teamDriver.optional(),
  })
  .superRefine((scenario, ctx) => {
    if (!scenario.turns && !scenario.members) ctx.addIssue({ code: 'custom', path: ['turns'], message: 'a scenario needs `turns`, `members`, or both' });
    if (scenario.coordinator) {
      for (const p of coordinatorProblems(scenario.coordinator)) ctx.addIssue({ code: 'custom', path: ['coordinator', ...p.path], message: p.message });
    }
    if (scenario.router) {
      for (const message of routerProblems(scenario.router)) ctx.addIssue({ code: 'custom', path: ['router'], message });
    }
    for (const action of ['reassign', 'cancelAll', 'pause'] as const) {
      const taskId = scenario.driver?.[action]?.taskId;
      if (taskId !== undefined && !scenario.coordinator?.tasks.some((t) => t.taskId === taskId)) {
        ctx.addIssue({ code: 'custom', path: ['driver', action, 'taskId'], message: `"${taskId}" is not a task of the coordinator's plan` });
      }
    }
    const known = new Set(scenario.router?.topics.map((t) => t.topic) ?? []);
    scenario.messages?.forEach((m, i) => {
      if (!known.has(m.topic)) ctx.addIssue({ code: 'custom', path: ['messages', i, 'topic'], message: `"${m.topic}" is not a router topic` });
    });
  });

export type Scenario = z.infer<typeof scenarioSchema>;
export type ScriptedTurn = NonNullable<Scenario['turns']>[number];
export type ScriptedStep = ScriptedTurn['steps'][number];

/** Validates an already-parsed scenario; `source` names it in the error (a path, or `inline`). */
export function parseScenario(value: unknown, source = 'inline'): Scenario {
  const parsed = scenarioSchema.safeParse(value);
  if (!parsed.success) {
    const why = describeIssues(parsed.error.issues);
    throw new ModelError('scenario_invalid', `scenario ${source} is invalid: ${why}`, false);
  }
  return parsed.data;
}

/** Parses scenario text as YAML for `.yaml`/`.yml` paths and as JSON otherwise. */
function parseScenarioText(text: string, source: string): Scenario {
  const yaml = ['.yaml', '.yml'].includes(extname(source).toLowerCase());
  let value: unknown;
  try {
    value = yaml ? parseYaml(text) : JSON.parse(text);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    const format = yaml ? 'YAML' : 'JSON';
    throw new ModelError('scenario_invalid', `scenario ${source} is not valid ${format}: ${why}`, false);
  }
  return parseScenario(value, source);
}

/** Scenarios are re-read only when the file changes; a handful of paths at most are in use. */
const CACHE_LIMIT = 32;
const cache = new Map<string, { mtimeMs: number; size: number; scenario: Scenario }>();

/** Reads and validates a scenario file, reusing the parsed copy while the file's mtime and size are unchanged. */
export async function loadScenario(path: string): Promise<Scenario> {
  const full = resolve(path);
  let text: string;
  let mtimeMs: number;
  let size: number;
  try {
    ({ mtimeMs, size } = await stat(full));
    const cached = cache.get(full);
    if (cached && cached.mtimeMs === mtimeMs && cached.size === size) return cached.scenario;
    text = await readFile(full, 'utf8');
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new ModelError('scenario_invalid', `cannot read scenario ${full}: ${why}`, false);
  }
  const scenario = parseScenarioText(text, full);
  cache.delete(full);
  cache.set(full, { mtimeMs, size, scenario });
  if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value as string);
  return scenario;
}
