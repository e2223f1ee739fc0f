/**
 * The board file that `orchard board check` reads: a `BoardSnapshot` (workflows/team/closure.ts) as JSON. The zod
 * schema here is the one definition of the format; `docs/board-format.schema.json` is generated from it
 * (`orchard board schema`). Not imported by workflow code: the closure validator stays free of zod.
 */
import { z } from 'zod';
import {
  HANDOFF_RESOLUTIONS,
  HANDOFF_STATES,
  TASK_STATUSES,
  type BoardBlockers,
  type BoardHandoff,
  type BoardOutput,
  type BoardSnapshot,
  type BoardTask,
  type BoardUserEvent,
  type TaskCancel,
} from '../workflows/team/closure';

const id = z.string().min(1);
const count = z.number().int().min(0);

const taskCancel = z
  .strictObject({
    by: z.enum(['user', 'coordinator']).describe('who cancelled: only a user cancel can remove scope'),
    kind: z.string().optional().describe('the structured kind of cancel, e.g. reassign or keep_stopped (informational)'),
    reason: z.string().optional().describe('why, as recorded (informational)'),
    userEventId: id.optional().describe('the user event that removed this task from scope (required for user_scope_removed)'),
  })
  .describe('how the task was cancelled');

const task = z.strictObject({
  id: id.describe('task id, unique on the board'),
  status: z.enum(TASK_STATUSES),
  outputId: id.optional().describe('the TaskOutput row this completed task points at'),
  replacesTaskId: id.optional().describe('the task this one replaces (cancel/reassign)'),
  cancel: taskCancel.optional(),
});

const output = z
  .strictObject({
    id: id.describe('TaskOutput id'),
    taskId: id.describe('the task that produced it'),
    generation: count.describe('the team generation that produced it'),
  })
  .describe('a TaskOutput evidence row');

const handoff = z
  .strictObject({
    oldTaskId: id,
    newTaskId: id.optional(),
    state: z.enum(HANDOFF_STATES),
    resolution: z.enum(HANDOFF_RESOLUTIONS).optional().describe("a user's resolution of a timed-out handoff; keep_stopped settles it"),
  })
  .describe('a cancel/reassign handoff receipt; anything but released (or resolved keep_stopped) blocks delivery');

const userEvent = z
  .strictObject({
    id,
    teamId: id.describe('the team the event was recorded for'),
    kind: z.string().min(1).describe('e.g. cancel_task, resolve_handoff, message'),
    taskId: id.describe('the task the event is about'),
  })
  .describe('a durable user event');

const boardFileSchema = z
  .strictObject({
    teamId: id,
    generation: count.describe('the current team generation; outputs of another generation are stale'),
    workRevision: count.describe('the board revision, bumped on every committed fact'),
    assessedRevision: count.describe('the revision the assessment was made at; must equal workRevision'),
    tasks: z.array(task),
    outputs: z.array(output),
    handoffs: z.array(handoff),
    userEvents: z.array(userEvent),
    blockers: z
      .strictObject({
        inboxUnread: count.describe('unread Coordinator inbox messages'),
        turnsRunning: count.describe('turns still running'),
      })
      .describe('facts that may still change the board'),
  })
  .meta({
    title: 'Orchard team board',
    description: 'A team board snapshot for the completion closure validator (`orchard board check`); see docs/board-format.md',
  });

type BoardFile = z.infer<typeof boardFileSchema>;

// The file format and the validator's input are one shape: this fails to compile when they drift apart.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Row<T extends readonly unknown[]> = T[number];
const shapeChecks: [
  BoardFile extends BoardSnapshot ? true : false,
  Same<keyof BoardFile, keyof BoardSnapshot>,
  Same<keyof Row<BoardFile['tasks']>, keyof BoardTask>,
  Same<keyof NonNullable<Row<BoardFile['tasks']>['cancel']>, keyof TaskCancel>,
  Same<keyof Row<BoardFile['outputs']>, keyof BoardOutput>,
  Same<keyof Row<BoardFile['handoffs']>, keyof BoardHandoff>,
  Same<keyof Row<BoardFile['userEvents']>, keyof BoardUserEvent>,
  Same<keyof BoardFile['blockers'], keyof BoardBlockers>,
] = [true, true, true, true, true, true, true, true];
void shapeChecks;

/** A board file that cannot be read or does not match the format; `path` is the JSON path at fault (`tasks[2].status`). */
export class BoardFileError extends Error {
  readonly code = 'board_file_invalid';
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(message);
    this.name = 'BoardFileError';
  }
}

/** Parses board JSON; `source` names the file in the error. */
export function parseBoardFile(text: string, source: string): BoardSnapshot {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new BoardFileError('$', `board file ${source} is not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed = boardFileSchema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => {
    // An unknown key is reported on its parent object; name the key itself, where a typo is easiest to see.
    const keys = issue.code === 'unrecognized_keys' ? issue.keys : [];
    return { path: jsonPath([...issue.path, ...keys.slice(0, 1)]), message: issue.message };
  });
  const listed = issues.slice(0, 5).map((i) => `${i.path}: ${i.message}`);
  const more = issues.length > 5 ? `; and ${issues.length - 5} more` : '';
  throw new BoardFileError(issues[0].path, `board file ${source} is malformed at ${listed.join('; ')}${more}`);
}

/** The JSON Schema of the board file, as committed in docs/board-format.schema.json. */
export function boardJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(boardFileSchema) as Record<string, unknown>;
}

/** `['tasks', 2, 'status']` → `tasks[2].status`; the root is `$`. */
function jsonPath(path: readonly PropertyKey[]): string {
  const text = path.map((key, i) => (typeof key === 'number' ? `[${key}]` : `${i === 0 ? '' : '.'}${String(key)}`)).join('');
  return text || '$';
}
