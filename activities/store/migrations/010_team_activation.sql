-- The run of `team/<id>` that activated the team (its first execution's run id): a new activation bumps the
-- generation, so evidence of an earlier activation is stale.
ALTER TABLE team_runs ADD COLUMN IF NOT EXISTS activation_id text;
