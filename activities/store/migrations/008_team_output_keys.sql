-- A task output's id is unique within its team, not across every team (two teams may both call theirs o1).
ALTER TABLE team_task_outputs DROP CONSTRAINT IF EXISTS team_task_outputs_pkey;
ALTER TABLE team_task_outputs ADD PRIMARY KEY (team_id, output_id);
