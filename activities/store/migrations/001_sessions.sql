-- Transcript of every session: OpenAI chat messages keyed by position, so an activity that is retried
-- after a crash writes the same row again (ON CONFLICT DO NOTHING) instead of a duplicate.
-- ordinal: 0 = the user message (step 0) or the assistant message of a step; 1.. = tool results in call order.
CREATE TABLE IF NOT EXISTS transcript_entries (
  session_id   text        NOT NULL,
  turn         integer     NOT NULL CHECK (turn >= 1),
  step         integer     NOT NULL CHECK (step >= 0),
  ordinal      integer     NOT NULL CHECK (ordinal >= 0),
  role         text        NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
  content      text,
  tool_calls   jsonb,
  tool_call_id text,
  task_id      text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, turn, step, ordinal)
);

-- Token usage and latency of every model call (one per session/turn/step).
CREATE TABLE IF NOT EXISTS model_calls (
  session_id        text        NOT NULL,
  turn              integer     NOT NULL,
  step              integer     NOT NULL,
  provider          text        NOT NULL,
  model             text        NOT NULL,
  prompt_tokens     integer     NOT NULL,
  completion_tokens integer     NOT NULL,
  total_tokens      integer     NOT NULL,
  finish_reason     text        NOT NULL,
  latency_ms        integer     NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (session_id, turn, step)
);

-- Invariant 11a: a tool call runs at most once. The claim is written before the tool starts; a retried
-- attempt that finds a settled row returns its output, one that finds only the claim reports `unknown`.
CREATE TABLE IF NOT EXISTS tool_dispatches (
  session_id  text        NOT NULL,
  turn        integer     NOT NULL,
  step        integer     NOT NULL,
  call_id     text        NOT NULL,
  tool        text        NOT NULL,
  host        text        NOT NULL,
  state       text        NOT NULL CHECK (state IN ('claimed', 'settled', 'unknown')),
  output_id   bigint,
  claimed_at  timestamptz NOT NULL DEFAULT now(),
  settled_at  timestamptz,
  PRIMARY KEY (session_id, turn, step, call_id)
);

-- Full tool output (the transcript holds what the model was shown, which may be shorter).
CREATE TABLE IF NOT EXISTS tool_outputs (
  id          bigserial   PRIMARY KEY,
  session_id  text        NOT NULL,
  turn        integer     NOT NULL,
  step        integer     NOT NULL,
  call_id     text        NOT NULL,
  tool        text        NOT NULL,
  ok          boolean     NOT NULL,
  exit_code   integer,
  stdout      text,
  stderr      text,
  content     text        NOT NULL,
  duration_ms integer     NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (session_id, turn, step, call_id)
);
