-- One fence per execution, not per task: a paused task starts again under a new execution, which a later pause,
-- cancel, reassign or archive fences with a receipt of its own.
ALTER TABLE team_handoff_receipts DROP CONSTRAINT IF EXISTS team_handoff_receipts_team_id_old_task_id_key;
CREATE UNIQUE INDEX IF NOT EXISTS team_handoff_receipts_per_execution ON team_handoff_receipts (team_id, old_task_id, execution_id);
