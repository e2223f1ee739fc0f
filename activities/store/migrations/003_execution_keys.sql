-- Stored effects are keyed by the execution that made them, not by position (issue 7, item 1). A session
-- re-created with the same id, a reset workflow and a continue-as-new chain must never find an old row keyed
-- only by (session, turn, step) and skip new work.
--   execution_id: minted in the workflow (uuid4) when a session's execution chain starts, carried across
--                 continue-as-new; 'legacy/<session>' for rows written before this migration (one chain per session id).
--   turn_id:      minted in the workflow (uuid4) when a turn begins; a reset re-runs that workflow task with a
--                 new random seed, so the re-run turn is a new attempt with new rows beside the old ones.
-- Rows written before this migration get turn_id 'legacy/<session>/<turn>'; the activities use the same keys
-- for calls from histories that carry no ids.

ALTER TABLE transcript_entries ADD COLUMN execution_id text;
ALTER TABLE transcript_entries ADD COLUMN turn_id text;
UPDATE transcript_entries SET execution_id = 'legacy/' || session_id, turn_id = 'legacy/' || session_id || '/' || turn;
ALTER TABLE transcript_entries ALTER COLUMN execution_id SET NOT NULL;
ALTER TABLE transcript_entries ALTER COLUMN turn_id SET NOT NULL;
-- Write order: picks the newest attempt of a turn number when a reset left an older one beside it.
ALTER TABLE transcript_entries ADD COLUMN seq bigserial;
-- Characters of content and tool calls, so the context budget is computed without reading the text.
ALTER TABLE transcript_entries ADD COLUMN chars integer NOT NULL DEFAULT 0;
UPDATE transcript_entries SET chars = coalesce(length(content), 0) + coalesce(length(tool_calls::text), 0);
ALTER TABLE transcript_entries DROP CONSTRAINT transcript_entries_pkey;
ALTER TABLE transcript_entries ADD PRIMARY KEY (turn_id, step, ordinal);
CREATE INDEX transcript_entries_execution ON transcript_entries (execution_id, turn);
CREATE INDEX transcript_entries_session ON transcript_entries (session_id, execution_id);

ALTER TABLE model_calls ADD COLUMN execution_id text;
ALTER TABLE model_calls ADD COLUMN turn_id text;
UPDATE model_calls SET execution_id = 'legacy/' || session_id, turn_id = 'legacy/' || session_id || '/' || turn;
ALTER TABLE model_calls ALTER COLUMN execution_id SET NOT NULL;
ALTER TABLE model_calls ALTER COLUMN turn_id SET NOT NULL;
ALTER TABLE model_calls DROP CONSTRAINT model_calls_pkey;
ALTER TABLE model_calls ADD PRIMARY KEY (turn_id, step);
CREATE INDEX model_calls_session ON model_calls (session_id);

ALTER TABLE tool_dispatches ADD COLUMN execution_id text;
ALTER TABLE tool_dispatches ADD COLUMN turn_id text;
UPDATE tool_dispatches SET execution_id = 'legacy/' || session_id, turn_id = 'legacy/' || session_id || '/' || turn;
ALTER TABLE tool_dispatches ALTER COLUMN execution_id SET NOT NULL;
ALTER TABLE tool_dispatches ALTER COLUMN turn_id SET NOT NULL;
ALTER TABLE tool_dispatches DROP CONSTRAINT tool_dispatches_pkey;
ALTER TABLE tool_dispatches ADD PRIMARY KEY (turn_id, step, call_id);
-- Why a claim is `unknown` (a retry found it unsettled, the worker shut down mid-command), for operators.
ALTER TABLE tool_dispatches ADD COLUMN unknown_reason text;
CREATE INDEX tool_dispatches_session ON tool_dispatches (session_id);

ALTER TABLE tool_outputs ADD COLUMN execution_id text;
ALTER TABLE tool_outputs ADD COLUMN turn_id text;
UPDATE tool_outputs SET execution_id = 'legacy/' || session_id, turn_id = 'legacy/' || session_id || '/' || turn;
ALTER TABLE tool_outputs ALTER COLUMN execution_id SET NOT NULL;
ALTER TABLE tool_outputs ALTER COLUMN turn_id SET NOT NULL;
ALTER TABLE tool_outputs DROP CONSTRAINT tool_outputs_session_id_turn_step_call_id_key;
ALTER TABLE tool_outputs ADD CONSTRAINT tool_outputs_call UNIQUE (turn_id, step, call_id);

-- Every task a session accepted (issue 7, items 3 and 8): its text lives here, workflow history carries the id.
-- state: queued → running → done | failed | cancelled; every accepted task ends in a terminal state.
CREATE TABLE IF NOT EXISTS session_tasks (
  execution_id text        NOT NULL,
  task_id      text        NOT NULL,
  session_id   text        NOT NULL,
  request_id   text,
  sender       text,
  task         text        NOT NULL,
  state        text        NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
  turn_id      text,
  outcome      text,
  reason       text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  ended_at     timestamptz,
  PRIMARY KEY (execution_id, task_id)
);
CREATE INDEX IF NOT EXISTS session_tasks_session ON session_tasks (session_id, created_at);
