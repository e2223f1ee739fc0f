-- Where a new session's conversation starts (issue 22): an explicit handoff, or its parent orchestrator's conversation
-- by reference (the orchestrator's transcript rows, never copied). One row per execution chain, written by the create
-- that started the chain; the model step reads it before the chain's own turns.
CREATE TABLE IF NOT EXISTS session_starting_context (
  execution_id        text        PRIMARY KEY,
  session_id          text        NOT NULL,
  request_id          text        NOT NULL,
  -- An explicit handoff (a user message before the first task), or NULL.
  handoff             text,
  -- The parent's conversation: every entry of its chain up to the model answer at (turn_id, step), or all NULL.
  parent_session_id   text,
  parent_execution_id text,
  parent_turn_id      text,
  parent_turn         integer,
  parent_step         integer,
  created_at          timestamptz NOT NULL DEFAULT now(),
  CHECK ((handoff IS NULL) <> (parent_turn_id IS NULL))
);
