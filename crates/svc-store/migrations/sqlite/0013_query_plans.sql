-- Query plans (decisions, "Query plans"): a list of one owner's or one tenant's sandboxes seeks
-- its own index to the page's start, newest first, instead of walking `sandboxes_by_created`
-- past everyone else's; an audit listing of one actor walks that actor's entries alone.
CREATE INDEX sandboxes_by_tenant_created ON sandboxes (tenant_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_by_owner_created ON sandboxes (owner_id, created_at DESC, id DESC);
CREATE INDEX audit_log_by_actor_time ON audit_log (actor, timestamp, seq);
