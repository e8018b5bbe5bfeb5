-- Query plans (decisions, "Query plans"). A list of one owner's or one tenant's sandboxes
-- seeks its own index to the page's start, newest first, instead of walking
-- `sandboxes_by_created` past everyone else's; an audit listing of one actor walks that
-- actor's entries alone.
CREATE INDEX sandboxes_by_tenant_created ON sandboxes (tenant_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_by_owner_created ON sandboxes (owner_id, created_at DESC, id DESC);
CREATE INDEX audit_log_by_actor_time ON audit_log (actor, timestamp, seq);

-- Keys are "C" (0001), and `sandbox_id` is one: the key of the sandbox it belongs to. In the
-- database's default collation, the join of a worker's sandboxes to their records compared in
-- `sandboxes.id`'s collation, which `exec_records_by_sandbox` is not sorted by, so a nested
-- loop could not seek that index.
ALTER TABLE exec_records ALTER COLUMN sandbox_id TYPE TEXT COLLATE "C";

-- Pruning deletes the events older than a time; rows are appended in time order, so a BRIN
-- index of a few pages finds them without a B-tree on every append (without it, every prune
-- read the whole table). `autosummarize` summarises each filled range as it closes rather than
-- at the next vacuum, which would leave recent ranges to be read whole.
CREATE INDEX events_by_created ON events USING brin (created_at) WITH (autosummarize = on);
