-- Timestamps are INTEGER microseconds since the Unix epoch (UTC): exact, and ordered by value.
CREATE TABLE sandboxes (
    id             TEXT PRIMARY KEY NOT NULL,
    state          TEXT NOT NULL,
    provider       TEXT NOT NULL,
    image          TEXT NOT NULL,
    memory_mb      INTEGER NOT NULL,
    vcpus          INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    destroyed_at   INTEGER,
    metadata       TEXT NOT NULL,
    env            TEXT NOT NULL,
    preview_domain TEXT NOT NULL,
    worker_id      TEXT,
    tenant_id      TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    template       TEXT,
    network        TEXT
) STRICT;

CREATE INDEX sandboxes_by_state_expiry ON sandboxes (state, expires_at);
CREATE INDEX sandboxes_by_owner ON sandboxes (owner_id, state);
CREATE INDEX sandboxes_by_created ON sandboxes (created_at DESC, id DESC);
CREATE INDEX sandboxes_by_destroyed ON sandboxes (destroyed_at) WHERE destroyed_at IS NOT NULL;

CREATE TABLE templates (
    name       TEXT PRIMARY KEY NOT NULL,
    image      TEXT NOT NULL,
    memory_mb  INTEGER NOT NULL,
    vcpus      INTEGER NOT NULL,
    ttl_nanos  INTEGER NOT NULL,
    provider   TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
