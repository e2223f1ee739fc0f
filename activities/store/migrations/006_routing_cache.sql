-- The orchestrator's routing cache: a projection of its authority ledger (workflow state) for dashboards and
-- for `list_orchestrator_agents`. Untrusted by design: nothing routes from it and nothing decides actionability
-- from it; a row whose child the ledger does not hold is reported as `routing_metadata_untrusted`.
CREATE TABLE IF NOT EXISTS orchestrator_routing_cache (
  orchestrator_id     text        NOT NULL,
  child_id            text        NOT NULL,
  title               text        NOT NULL,
  agent               text        NOT NULL,
  topic_key           text,
  routing_description text,
  routing_aliases     jsonb       NOT NULL DEFAULT '[]'::jsonb,
  status              text        NOT NULL,
  -- The ledger's logical clock at the child's last activity: a projection never moves a row backwards.
  ledger_clock        bigint      NOT NULL,
  updated_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (orchestrator_id, child_id)
);
