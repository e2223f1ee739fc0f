-- `orchard team merge` (issue 9): at most one merge per certificate. The row is written `planned` (the protected
-- branch's head before, the head it will have after, and how) before the branch moves, and `merged` after, with
-- the user event and its fact: a retried merge finishes the same plan (one merge commit at most), and a repeated
-- merge answers the recorded result.
CREATE TABLE IF NOT EXISTS team_merges (
  team_id          text        NOT NULL REFERENCES team_runs (team_id),
  certificate_id   text        NOT NULL,
  state            text        NOT NULL CHECK (state IN ('planned', 'merged')),
  protected_branch text        NOT NULL,
  result_branch    text        NOT NULL,
  result_head      text        NOT NULL,
  before_sha       text        NOT NULL,
  after_sha        text        NOT NULL,
  mode             text        NOT NULL CHECK (mode IN ('already_contained', 'fast_forward', 'merge_commit')),
  event_id         text        NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  merged_at        timestamptz,
  PRIMARY KEY (team_id, certificate_id)
);
