-- Which Coordinator read took a message (its tool call: turn id, step, call id). A retried read — its first attempt's
-- result lost with a worker — gets the same messages again instead of finding them read and showing none.
ALTER TABLE team_inbox ADD COLUMN IF NOT EXISTS read_by text;
