-- One certificate per generation (invariant 15), held by the database and not only by the check issueCertificate
-- makes under the run row's lock: a second certificate of a generation is refused, and the insert answers the one
-- there (ON CONFLICT), so a retried certification after a lost COMMIT gets the same certificate.
--
-- The code of 2026-12-03 (before "One RunCompletionCertificate per generation") issued one per generation *and
-- revision*: a completion request after later facts could add a second for the same generation. Such rows are kept
-- (a merge may name one) but marked `legacy_extra`, and the index leaves them out. The generation's certificate is
-- its first, as every reader already takes it (ORDER BY work_revision LIMIT 1).
ALTER TABLE team_certificates ADD COLUMN IF NOT EXISTS legacy_extra boolean NOT NULL DEFAULT false;

UPDATE team_certificates c SET legacy_extra = true
WHERE EXISTS (
  SELECT 1 FROM team_certificates first
  WHERE first.team_id = c.team_id AND first.generation = c.generation AND first.work_revision < c.work_revision
);

CREATE UNIQUE INDEX IF NOT EXISTS team_certificates_one_per_generation ON team_certificates (team_id, generation) WHERE NOT legacy_extra;
