-- The whole schema of SQLite's migrations 0001-0007 in one step, plus the event log of the
-- scale-out issue. Encodings match SQLite's so both backends share their row codec:
-- timestamps are BIGINT microseconds since the Unix epoch (exact, ordered by value), counts
-- and sizes BIGINT, maps and lists JSON text. Keys and every column a listing orders by use
-- the "C" collation: byte order, as SQLite's BINARY, whatever the database's locale.

CREATE TABLE sandboxes (
    id             TEXT COLLATE "C" PRIMARY KEY,
    state          TEXT NOT NULL
                   CHECK (state IN ('creating', 'running', 'destroyed', 'error')),
    provider       TEXT NOT NULL,
    image          TEXT NOT NULL,
    memory_mb      BIGINT NOT NULL CHECK (memory_mb >= 0),
    vcpus          BIGINT NOT NULL CHECK (vcpus >= 0),
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    destroyed_at   BIGINT,
    metadata       TEXT NOT NULL,
    env            TEXT NOT NULL,
    preview_domain TEXT NOT NULL,
    worker_id      TEXT,
    tenant_id      TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    template       TEXT,
    network        TEXT,
    state_reason   TEXT,
    state_message  TEXT,
    -- When the sandbox ended (destroyed or error); retention purges by it.
    ended_at       BIGINT
);

-- Listings, newest first.
CREATE INDEX sandboxes_by_created ON sandboxes (created_at DESC, id DESC);
-- The reaper: running sandboxes by expiry.
CREATE INDEX sandboxes_by_state_expiry ON sandboxes (state, expires_at);
-- Admission and usage count the sandboxes holding a runtime, in all and per owner, inside the
-- serialised admitting transaction: a partial index keeps that to the live rows.
CREATE INDEX sandboxes_holding_by_owner ON sandboxes (owner_id)
    WHERE state IN ('creating', 'running');
-- Retention.
CREATE INDEX sandboxes_by_ended ON sandboxes (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE templates (
    name       TEXT COLLATE "C" PRIMARY KEY,
    image      TEXT NOT NULL,
    memory_mb  BIGINT NOT NULL CHECK (memory_mb >= 0),
    vcpus      BIGINT NOT NULL CHECK (vcpus >= 0),
    ttl_nanos  BIGINT NOT NULL CHECK (ttl_nanos >= 0),
    provider   TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Per-owner overrides of the global limits. Durations are whole seconds; 0 inherits the
-- global value (decisions §10).
CREATE TABLE owner_quotas (
    owner_id              TEXT COLLATE "C" PRIMARY KEY,
    max_sandboxes         BIGINT NOT NULL CHECK (max_sandboxes >= 0),
    max_ttl_secs          BIGINT NOT NULL CHECK (max_ttl_secs >= 0),
    max_exec_timeout_secs BIGINT NOT NULL CHECK (max_exec_timeout_secs >= 0),
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL
);

-- The worker registry and durable leases (decisions §11).
CREATE TABLE workers (
    id                      TEXT COLLATE "C" PRIMARY KEY,
    hostname                TEXT NOT NULL,
    status                  TEXT NOT NULL
                            CHECK (status IN ('online', 'unhealthy', 'offline', 'draining')),
    providers               TEXT NOT NULL,
    capabilities            TEXT NOT NULL,
    max_sandboxes           BIGINT NOT NULL CHECK (max_sandboxes >= 0),
    max_sandboxes_per_owner BIGINT NOT NULL CHECK (max_sandboxes_per_owner >= 0),
    url                     TEXT,
    last_heartbeat          BIGINT NOT NULL,
    created_at              BIGINT NOT NULL,
    updated_at              BIGINT NOT NULL
);

-- A lease row is kept after release (expired), so a resource's generation never goes back;
-- rows go with their sandbox's record when it is purged. No index on the holder: every spawn
-- and every end writes its sandbox's lease, and only the heartbeat's renew-all and diagnostics
-- read by holder (SQLite's 0006).
CREATE TABLE leases (
    resource_id TEXT COLLATE "C" PRIMARY KEY,
    holder_id   TEXT COLLATE "C" NOT NULL,
    generation  BIGINT NOT NULL CHECK (generation >= 1),
    expires_at  BIGINT NOT NULL
);

-- One random ID per database: runtimes are labelled with it, so reconciliation adopts only
-- runtimes this deployment made.
CREATE TABLE meta (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value)
    VALUES ('installation_id', replace(gen_random_uuid()::text, '-', ''));

-- Tenants (decisions §6). A tenant's members and policies are deleted with it, in the store's
-- statement (no foreign keys: a member or policy names its tenant by ID).
CREATE TABLE tenants (
    id         TEXT COLLATE "C" PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- The tenant every API-key and anonymous caller belongs to; it always exists.
INSERT INTO tenants (id, name, created_at)
    VALUES ('default', 'Default', (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT);

-- The primary key serves a tenant's members by subject.
CREATE TABLE tenant_members (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    subject    TEXT COLLATE "C" NOT NULL,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, subject)
);

CREATE TABLE tenant_policies (
    id         TEXT COLLATE "C" PRIMARY KEY,
    tenant_id  TEXT COLLATE "C" NOT NULL,
    name       TEXT NOT NULL,
    resource   TEXT NOT NULL CHECK (resource IN ('image', 'provider', 'network')),
    pattern    TEXT NOT NULL,
    effect     TEXT NOT NULL CHECK (effect IN ('allow', 'deny')),
    priority   BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- A tenant's policies in evaluation order (priority DESC, id), without a sort.
CREATE INDEX tenant_policies_by_tenant ON tenant_policies (tenant_id, priority DESC, id);

-- Append-only. `seq` orders entries written in the same microsecond; `details` is a JSON object
-- kept as written.
CREATE TABLE audit_log (
    seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id        TEXT COLLATE "C" NOT NULL UNIQUE,
    timestamp BIGINT NOT NULL,
    actor     TEXT NOT NULL,
    role      TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    action    TEXT NOT NULL,
    resource  TEXT NOT NULL,
    outcome   TEXT NOT NULL,
    details   TEXT NOT NULL
);

-- Both are read backwards: newest first (timestamp DESC, seq DESC), a time range as the index
-- range, the limit ending the scan early. One per tenant, one over every tenant.
CREATE INDEX audit_log_by_tenant_time ON audit_log (tenant_id, timestamp, seq);
CREATE INDEX audit_log_by_time ON audit_log (timestamp, seq);

-- Events published by every replica, for a replica to catch up on what it missed
-- (decisions §12). `instance` is the publishing replica's UUID; `seq` the order of arrival.
CREATE TABLE events (
    seq        BIGSERIAL PRIMARY KEY,
    instance   TEXT NOT NULL,
    id         TEXT NOT NULL UNIQUE,
    payload    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
