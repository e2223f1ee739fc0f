-- A task's dispatch in flight: set with in_progress when an execution starts its task, cleared once the Member's
-- session has the task (or the hand-over gave up). A fence of that execution waits for it instead of freezing a task
-- whose session is about to be created.
ALTER TABLE team_tasks ADD COLUMN IF NOT EXISTS dispatching_since timestamptz;
