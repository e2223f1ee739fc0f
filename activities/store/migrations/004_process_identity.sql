-- Who a recorded process group is, written before the command's own code runs (the runner's gate), so any
-- later worker on the host can tell the command's processes from strangers that reused a pid, and reap the
-- orphans of a worker that died (activities/bash/reaper.ts). Rows recorded before this migration have NULLs:
-- their processes cannot be identified, so the reaper never kills for them and fails closed.
ALTER TABLE lease_process_groups
  -- /proc/sys/kernel/random/boot_id when recorded: start times count within one boot; another boot means gone.
  ADD COLUMN IF NOT EXISTS boot_id               text,
  -- The leader's start time (clock ticks after boot, field 22 of /proc/<pid>/stat).
  ADD COLUMN IF NOT EXISTS start_time            bigint,
  -- The ORCHARD_RUN_ID value every process of the command inherits.
  ADD COLUMN IF NOT EXISTS marker                text,
  -- The worker process that spawned and supervises the command: the start-up sweep leaves a live one's alone.
  ADD COLUMN IF NOT EXISTS supervisor_pid        integer,
  ADD COLUMN IF NOT EXISTS supervisor_start_time bigint,
  -- Why the row was ended: exited (its own teardown verified it), reaped (killed by the reaper), gone (nothing
  -- of it was alive when checked), rebooted (recorded in an earlier boot).
  ADD COLUMN IF NOT EXISTS end_reason            text
    CHECK (end_reason IN ('exited', 'reaped', 'gone', 'rebooted')),
  -- The last time the reaper could not verify it gone, and which pids it found alive then (for operators).
  ADD COLUMN IF NOT EXISTS checked_at            timestamptz,
  ADD COLUMN IF NOT EXISTS alive_pids            integer[];

-- The reaper's lookups: open groups by host (the start-up sweep) and by call (an `unknown` retry).
CREATE INDEX IF NOT EXISTS lease_process_groups_open_by_host
  ON lease_process_groups (host, call_key) WHERE ended_at IS NULL;
