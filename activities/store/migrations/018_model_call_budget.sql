-- Token budgets (issue 22): what each model call reserved before it was sent and what it was charged. A model that
-- reports no usage leaves the token counts NULL (not 0) and is charged its reservation.
ALTER TABLE model_calls ALTER COLUMN prompt_tokens DROP NOT NULL;
ALTER TABLE model_calls ALTER COLUMN completion_tokens DROP NOT NULL;
ALTER TABLE model_calls ALTER COLUMN total_tokens DROP NOT NULL;
ALTER TABLE model_calls ADD COLUMN reserved_tokens integer;
ALTER TABLE model_calls ADD COLUMN charged_tokens integer;
