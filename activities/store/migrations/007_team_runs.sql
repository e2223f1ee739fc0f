-- Team runs (issue 9): the formal board and its facts live here; the TeamRun workflow holds ids and revisions.
-- Every committed fact bumps the run's work_revision in the same transaction as the change it records, so a
-- Coordinator that has seen revision N knows exactly whether anything happened since.
CREATE TABLE IF NOT EXISTS team_runs (
  team_id          text        PRIMARY KEY,
  repo             text        NOT NULL,
  goal             text        NOT NULL,
  protected_branch text        NOT NULL DEFAULT 'main',
  generation       integer     NOT NULL DEFAULT 1,
  work_revision    bigint      NOT NULL DEFAULT 0,
  created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS team_members (
  team_id    text NOT NULL REFERENCES team_runs (team_id),
  member_id  text NOT NULL,
  role       text NOT NULL,
  -- The Member's own session (and so its own worktree and lease).
  session_id text NOT NULL,
  PRIMARY KEY (team_id, member_id)
);

CREATE TABLE IF NOT EXISTS team_tasks (
  team_id          text        NOT NULL REFERENCES team_runs (team_id),
  task_id          text        NOT NULL,
  title            text        NOT NULL,
  description      text        NOT NULL DEFAULT '',
  owner            text,
  status           text        NOT NULL CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled')),
  replaces_task_id text,
  output_id        text,
  -- {by: user|coordinator, kind, reason, userEventId}
  cancel           jsonb,
  generation       integer     NOT NULL,
  updated_revision bigint      NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, task_id)
);

-- Evidence: what a Member's execution delivered for a task (never written on a Coordinator's behalf).
CREATE TABLE IF NOT EXISTS team_task_outputs (
  output_id    text        PRIMARY KEY,
  team_id      text        NOT NULL REFERENCES team_runs (team_id),
  task_id      text        NOT NULL,
  generation   integer     NOT NULL,
  execution_id text        NOT NULL,
  summary      text        NOT NULL,
  commit_sha   text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (team_id, task_id, execution_id)
);

-- The log of committed facts; (team_id, revision) is the work_revision each one produced.
CREATE TABLE IF NOT EXISTS team_facts (
  team_id    text        NOT NULL REFERENCES team_runs (team_id),
  revision   bigint      NOT NULL,
  kind       text        NOT NULL,
  task_id    text,
  actor      text        NOT NULL,
  detail     jsonb       NOT NULL DEFAULT '{}'::jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, revision)
);

CREATE TABLE IF NOT EXISTS team_user_events (
  team_id    text        NOT NULL REFERENCES team_runs (team_id),
  event_id   text        NOT NULL,
  kind       text        NOT NULL,
  task_id    text,
  text       text        NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, event_id)
);

CREATE TABLE IF NOT EXISTS team_inbox (
  team_id         text        NOT NULL REFERENCES team_runs (team_id),
  message_id      text        NOT NULL,
  from_member     text        NOT NULL,
  related_task_id text        NOT NULL,
  purpose         text        NOT NULL CHECK (purpose IN ('blocker', 'decision_required', 'material_change', 'risk', 'requested_reply')),
  text            text        NOT NULL,
  read_revision   bigint,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, message_id)
);

CREATE TABLE IF NOT EXISTS team_handoff_receipts (
  receipt_id   text        PRIMARY KEY,
  team_id      text        NOT NULL REFERENCES team_runs (team_id),
  old_task_id  text        NOT NULL,
  new_task_id  text        NOT NULL,
  owner        text        NOT NULL,
  session_id   text        NOT NULL,
  execution_id text        NOT NULL,
  lease        jsonb,
  generation   integer     NOT NULL,
  state        text        NOT NULL CHECK (state IN ('requested', 'yielding', 'released', 'timeout', 'unknown', 'failed')),
  reason       jsonb       NOT NULL,
  slo_missed   boolean     NOT NULL DEFAULT false,
  resolution   jsonb,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (team_id, old_task_id)
);

-- One certificate per generation and revision; a retried certification finds it (idempotent).
CREATE TABLE IF NOT EXISTS team_certificates (
  team_id       text        NOT NULL REFERENCES team_runs (team_id),
  generation    integer     NOT NULL,
  work_revision bigint      NOT NULL,
  certificate   jsonb       NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team_id, generation, work_revision)
);
