-- One live worker per host id. A host id names a disk full of worktrees and the task queue
-- `orchard-host-<id>` that touches them: two workers claiming one id (a copied state dir, a duplicated
-- ORCHARD_HOST_ID) would run one session's commands on two machines. A worker registers its instance here at
-- start, heartbeats while it runs and releases on a graceful stop. A holder with a fresh heartbeat is refused
-- a second instance, unless it is provably dead: same boot (boot_id) and pid namespace, and its pid is gone
-- (a supervisor restarting a worker after kill -9).
CREATE TABLE IF NOT EXISTS worker_hosts (
  host_id       text        PRIMARY KEY,
  instance_id   text        NOT NULL,
  hostname      text        NOT NULL,
  boot_id       text        NOT NULL,
  pid_namespace text        NOT NULL,
  pid           integer     NOT NULL,
  state         text        NOT NULL CHECK (state IN ('running', 'released')),
  started_at    timestamptz NOT NULL DEFAULT now(),
  heartbeat_at  timestamptz NOT NULL DEFAULT now(),
  released_at   timestamptz
);
