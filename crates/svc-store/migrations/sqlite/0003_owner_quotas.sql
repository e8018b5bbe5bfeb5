-- The governance issue: per-owner overrides of the global limits. Durations are whole seconds;
-- 0 inherits the global value (decisions §10).
CREATE TABLE owner_quotas (
    owner_id             TEXT PRIMARY KEY NOT NULL,
    max_sandboxes        INTEGER NOT NULL CHECK (max_sandboxes >= 0),
    max_ttl_secs         INTEGER NOT NULL CHECK (max_ttl_secs >= 0),
    max_exec_timeout_secs INTEGER NOT NULL CHECK (max_exec_timeout_secs >= 0),
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
