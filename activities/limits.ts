import { limitProblem, type SessionLimits } from '../contract/messages';

/**
 * Session defaults a worker's operator may set in its environment. They are read only by the local activity
 * that resolves a session's limits when its chain starts; the result is recorded in history and carried across
 * continue-as-new, so changing a variable on a running worker changes new sessions, never a replayed decision.
 */
const LIMIT_ENV: Readonly<Record<keyof SessionLimits, string>> = {
  maxStepsPerTurn: 'ORCHARD_MAX_STEPS_PER_TURN',
  turnsPerRun: 'ORCHARD_TURNS_PER_RUN',
  bashTimeoutSeconds: 'ORCHARD_BASH_TIMEOUT_SECONDS',
  hostWaitSeconds: 'ORCHARD_HOST_WAIT_SECONDS',
  maxQueuedTasks: 'ORCHARD_MAX_QUEUED_TASKS',
  historyBudgetBytes: 'ORCHARD_HISTORY_BUDGET_BYTES',
  contextChars: 'ORCHARD_CONTEXT_CHARS',
  maxOutputTokens: 'ORCHARD_MAX_OUTPUT_TOKENS',
};

/** ORCHARD_DEFAULT_BUDGET_TOKENS: the budget of a session, orchestrator or team started without one (none if unset). */
export function defaultBudgetFromEnv(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.ORCHARD_DEFAULT_BUDGET_TOKENS;
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`ORCHARD_DEFAULT_BUDGET_TOKENS=${raw}: must be a positive integer (tokens)`);
  return value;
}

/** The limits set in `env`; a value that is not a valid limit is an error, not silently ignored. */
export function limitsFromEnv(env: NodeJS.ProcessEnv): Partial<SessionLimits> {
  const out: Partial<Record<keyof SessionLimits, number>> = {};
  for (const [key, name] of Object.entries(LIMIT_ENV) as [keyof SessionLimits, string][]) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const value = Number(raw);
    const problem = limitProblem(key, value);
    if (problem) throw new Error(`${name}=${raw}: ${problem}`);
    out[key] = value;
  }
  return out;
}
