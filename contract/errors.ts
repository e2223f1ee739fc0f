/**
 * Every refusal Orchard returns has one of these codes, as the `type` of an ApplicationFailure
 * (workflows, activities) or the `code` of an OrchardError (client). Callers in any language match on
 * the code; the message says what to do instead.
 *
 * This module imports nothing, so the CLI throws and matches these without loading the Temporal SDK (its start
 * time); the ApplicationFailure workflows and activities throw is made by contract/failures.ts.
 */
export const ERROR_CODES = [
  'invalid_input',
  'task_empty',
  'task_too_large',
  // A new session's starting context (issue 22): both kinds at once, or a context for a session that already has a conversation; a handoff over its cap.
  'context_conflict',
  'context_too_large',
  'session_not_found',
  'session_closed',
  'session_closing',
  'orchestrator_not_found',
  'orchestrator_closed',
  'team_not_found',
  'wait_timeout',
  'task_not_found',
  'task_not_in_progress',
  'task_not_pending',
  'task_not_startable',
  'task_not_replaceable',
  'replacement_blocked',
  'member_not_found',
  'same_owner',
  'receipt_not_found',
  'handoff_not_blocked',
  'old_runtime_not_quiescent',
  'handoff_yield_failed',
  'team_not_running',
  'not_delivered',
  'run_delivered',
  'team_paused',
  'team_not_paused',
  'team_archived',
  'verification_not_configured',
  'merge_conflict',
  'checkout_dirty',
  'branch_not_found',
  'queue_full',
  // Token budgets: a model call that would pass the budget is not sent; a parent cannot carve what it does not have.
  'budget_exhausted',
  'budget_insufficient',
  'store_unavailable',
  'model_rate_limited',
  'model_unavailable',
  'model_timeout',
  'model_auth_failed',
  'model_request_rejected',
  'model_response_malformed',
  'host_unavailable',
  'already_running_with',
  'scenario_invalid',
  'board_file_invalid',
  'scenario_exhausted',
  'scenario_expectation_failed',
  'tool_unknown',
  'tool_args_invalid',
  'path_outside_worktree',
  'worktree_create_failed',
  'repository_not_found',
  'lease_stale',
  'worktree_held',
  'worktree_liveness_unknown',
  'worktree_processes_alive',
  'command_not_started',
  'file_not_found',
  'file_is_directory',
  'file_not_text',
  'git_command_failed',
  'temporal_config_invalid',
  'payload_key_invalid',
  'payload_decryption_failed',
  'model_not_configured',
  'dev_config_invalid',
  'temporal_unavailable',
  'temporal_timeout',
  'temporal_auth_failed',
  'temporal_error',
  'namespace_not_found',
  'worker_unavailable',
  'database_unavailable',
  'search_attributes_missing',
  'host_id_in_use',
  'dev_already_running',
  // Confinement (docs/confinement.md): the host cannot build the sandbox, or a command changed what it must not.
  'sandbox_unavailable',
  'verification_hold',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/**
 * A refusal with a typed code and a message that says what to do instead: what the client throws (client/ re-exports
 * it), and what activities receive from the Temporal port (contract/temporal-port.ts) and match on by code.
 */
export class OrchardError extends Error {
  constructor(
    readonly code: ErrorCode | 'internal',
    message: string,
  ) {
    super(message);
    this.name = 'OrchardError';
  }
}
