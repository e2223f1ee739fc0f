-- Verification after every command (issue 10, docs/confinement.md, layer 3): when an isolated child's command changed
-- something it must not (another ref, a HEAD, config, hooks, the stash, the worktree list), its worktree is held:
-- no further command runs there until a user resolves the hold. One open hold per worktree (the first change found
-- is kept; a later command never runs to add another); resolved holds stay as the record.
CREATE TABLE IF NOT EXISTS verification_holds (
  hold_id     bigserial   PRIMARY KEY,
  worktree    text        NOT NULL, -- the lease key, <host>:<path>
  session_id  text        NOT NULL,
  command     text        NOT NULL,
  changes     jsonb       NOT NULL,
  held_at     timestamptz NOT NULL DEFAULT now(),
  resolved_at timestamptz,
  resolved_by text,
  note        text
);
CREATE UNIQUE INDEX IF NOT EXISTS verification_holds_open ON verification_holds (worktree) WHERE resolved_at IS NULL;
