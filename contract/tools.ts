/**
 * The tools a model sees are data: name, description and JSON schema. The code that runs them lives in
 * `activities/tools/`; a profile is a list of these definitions, so a session can only be offered (and
 * can only execute) what its profile names.
 */
export interface ToolDefinition {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the arguments object, sent to the model verbatim. */
  readonly parameters: Record<string, unknown>;
}

/**
 * The tool profiles a session runs with (`TOOL_PROFILES` in workflows/tools.ts lists each one's definitions): a child
 * session, a team Member, an orchestrator and a team's Coordinator.
 */
export type ToolProfile = 'child' | 'member' | 'orchestrator' | 'coordinator';
