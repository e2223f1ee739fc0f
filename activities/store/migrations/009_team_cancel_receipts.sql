-- A user's cancel of running work is a handoff without a replacement: its receipt has no new task.
ALTER TABLE team_handoff_receipts ALTER COLUMN new_task_id DROP NOT NULL;
