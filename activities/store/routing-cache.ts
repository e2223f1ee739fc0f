import type { Pool } from 'pg';
import type { OrchestratorChildView } from '../../contract/messages';
import type { RoutingCacheRow } from '../../contract/orchestrator-activities';

/** Writes ledger rows into the cache; a row already projected from a later ledger state is left alone. */
export async function projectRoutingCache(pool: Pool, orchestratorId: string, children: readonly OrchestratorChildView[]): Promise<void> {
  for (const c of children) {
    await pool.query(
      `INSERT INTO orchestrator_routing_cache
         (orchestrator_id, child_id, title, agent, topic_key, routing_description, routing_aliases, status, ledger_clock)
       VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9)
       ON CONFLICT (orchestrator_id, child_id) DO UPDATE SET
         title = EXCLUDED.title, agent = EXCLUDED.agent, topic_key = EXCLUDED.topic_key,
         routing_description = EXCLUDED.routing_description, routing_aliases = EXCLUDED.routing_aliases,
         status = EXCLUDED.status, ledger_clock = EXCLUDED.ledger_clock, updated_at = now()
       WHERE orchestrator_routing_cache.ledger_clock <= EXCLUDED.ledger_clock`,
      [
        orchestratorId,
        c.childId,
        c.title,
        c.agent,
        c.topicKey ?? null,
        c.routingDescription ?? null,
        JSON.stringify(c.routingAliases),
        c.status,
        c.lastActivity,
      ],
    );
  }
}

export async function readRoutingCache(pool: Pool, orchestratorId: string, limit = 200): Promise<RoutingCacheRow[]> {
  const { rows } = await pool.query(
    `SELECT child_id, title, agent, topic_key, routing_description, routing_aliases, status
       FROM orchestrator_routing_cache WHERE orchestrator_id = $1 ORDER BY child_id LIMIT $2`,
    [orchestratorId, limit],
  );
  return rows.map((r) => ({
    childId: r.child_id,
    title: r.title,
    agent: r.agent,
    topicKey: r.topic_key ?? undefined,
    routingDescription: r.routing_description ?? undefined,
    routingAliases: Array.isArray(r.routing_aliases) ? r.routing_aliases.filter((a: unknown) => typeof a === 'string') : [],
    status: String(r.status),
  }));
}
