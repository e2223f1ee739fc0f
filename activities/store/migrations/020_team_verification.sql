-- A team run's verify command ({"command", "timeoutMs"}; null: the run is delivered on its board alone), set by each
-- activation: the certificate of a run that has one must bind a passing verification of its result.
ALTER TABLE team_runs ADD COLUMN IF NOT EXISTS verify jsonb;

-- Every run of a verify command against a result tree (issue 22): at completion, and again on `orchard team verify`.
-- The output itself lives here; certificates and history carry its digest.
CREATE TABLE IF NOT EXISTS team_verifications (
  verification_id   text        PRIMARY KEY,
  team_id           text        NOT NULL REFERENCES team_runs (team_id),
  purpose           text        NOT NULL CHECK (purpose IN ('completion', 'recheck')),
  certificate_id    text,
  result_head       text        NOT NULL,
  tree              text        NOT NULL,
  command           text        NOT NULL,
  exit_code         integer,
  signal            text,
  timed_out         boolean     NOT NULL,
  duration_ms       integer     NOT NULL,
  confined          boolean     NOT NULL,
  output_digest     text        NOT NULL,
  stdout            text        NOT NULL,
  stderr            text        NOT NULL,
  output_truncated  boolean     NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS team_verifications_by_team ON team_verifications (team_id, created_at);
