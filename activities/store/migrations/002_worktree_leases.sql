-- Invariants 8 and 11: one writer per worktree. A lease is (worktree, holder, generation, state); every
-- workspace-mutating activity revalidates it immediately before its side effect, and a takeover bumps the
-- generation so a stale holder's late call is refused. The holder is an execution chain of a session workflow
-- (`session/<id>@<firstRunId>`): continue-as-new keeps it, a new session on the same worktree does not.
CREATE TABLE IF NOT EXISTS worktree_leases (
  worktree    text        PRIMARY KEY,
  host        text        NOT NULL,
  holder      text        NOT NULL,
  generation  bigint      NOT NULL CHECK (generation >= 1),
  state       text        NOT NULL CHECK (state IN ('held', 'released')),
  acquired_at timestamptz NOT NULL DEFAULT now(),
  renewed_at  timestamptz NOT NULL DEFAULT now(),
  released_at timestamptz
);

-- Every command's process group, recorded against the lease generation that ran it, so "no process of this
-- execution is alive" can be checked (on the lease's host) before anyone else writes in the worktree.
CREATE TABLE IF NOT EXISTS lease_process_groups (
  worktree    text        NOT NULL,
  generation  bigint      NOT NULL,
  host        text        NOT NULL,
  pgid        integer     NOT NULL,
  call_key    text        NOT NULL,
  started_at  timestamptz NOT NULL DEFAULT now(),
  ended_at    timestamptz,
  PRIMARY KEY (worktree, generation, pgid, call_key)
);
