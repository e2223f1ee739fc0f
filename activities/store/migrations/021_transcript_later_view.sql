-- A tool result as turns after its own show it (issue 23): an orchestrator's create/send/list result without the
-- roster it ended with (stale once its turn ends; workflows/orchestrator/echo.ts laterView). NULL: shown as it is.
-- `content` keeps the result whole.
ALTER TABLE transcript_entries ADD COLUMN later_content text;
