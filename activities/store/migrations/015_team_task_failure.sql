-- Why a task failed, as its execution saw it: the typed code and message of the Member's failed turn or closed
-- session ({"code": …, "message": …}). Shown on the board, to the Coordinator and in `orchard team status`.
ALTER TABLE team_tasks ADD COLUMN IF NOT EXISTS failure jsonb;
