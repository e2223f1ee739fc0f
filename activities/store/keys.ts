/**
 * Every stored effect of a session (transcript, model calls, tool claims and outputs, tasks) is keyed by the
 * execution that made it (issue 7, item 1): `executionId` is minted by the workflow when its execution chain
 * starts and carried across continue-as-new; `turnId` is minted when a turn begins. A re-created session or a
 * reset therefore writes new rows instead of finding old ones and skipping its new work.
 */
export interface TurnKey {
  readonly sessionId: string;
  /** The session's execution chain; `legacy/<session>` for rows written before execution keys existed. */
  readonly executionId: string;
  /** Unique to one attempt of one turn. */
  readonly turnId: string;
  /** The turn's number within the chain (1-based): orders the conversation. */
  readonly turn: number;
}

/** What activity inputs carry; histories recorded before execution keys carry neither id. */
export interface TurnKeyInput {
  readonly sessionId: string;
  readonly turn: number;
  readonly executionId?: string;
  readonly turnId?: string;
}

/** Calls from histories recorded before execution keys use the keys migration 003 gave the old rows. */
export function turnKeyOf(input: TurnKeyInput): TurnKey {
  return {
    sessionId: input.sessionId,
    turn: input.turn,
    executionId: input.executionId ?? `legacy/${input.sessionId}`,
    turnId: input.turnId ?? `legacy/${input.sessionId}/${input.turn}`,
  };
}
