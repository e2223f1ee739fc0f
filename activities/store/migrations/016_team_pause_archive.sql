-- The execution a task in progress belongs to: a paused task returns to pending and starts again under a new
-- execution, so the evidence (or failure) of the old, fenced one is refused by id rather than by status.
ALTER TABLE team_tasks ADD COLUMN IF NOT EXISTS execution_id text;
-- A user's archive of the whole run ({"eventId", "reason"}): nothing more is dispatched or certified.
ALTER TABLE team_runs ADD COLUMN IF NOT EXISTS archived jsonb;
