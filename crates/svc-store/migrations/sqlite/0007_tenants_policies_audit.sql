-- The tenancy issue (decisions §6): tenants, the roles granted to OIDC subjects inside them,
-- their policies, and the audit log. A tenant's members and policies are deleted with it, in
-- the store's transaction (no foreign keys: a member or policy names its tenant by ID).
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- The tenant every API-key and anonymous caller belongs to; it always exists.
INSERT INTO tenants (id, name, created_at)
    VALUES ('default', 'Default', CAST(unixepoch('subsec') * 1000000 AS INTEGER));

-- The primary key serves a tenant's members by subject.
CREATE TABLE tenant_members (
    tenant_id  TEXT NOT NULL,
    subject    TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, subject)
) STRICT, WITHOUT ROWID;

CREATE TABLE tenant_policies (
    id         TEXT PRIMARY KEY NOT NULL,
    tenant_id  TEXT NOT NULL,
    name       TEXT NOT NULL,
    resource   TEXT NOT NULL CHECK (resource IN ('image', 'provider', 'network')),
    pattern    TEXT NOT NULL,
    effect     TEXT NOT NULL CHECK (effect IN ('allow', 'deny')),
    priority   INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- A tenant's policies in evaluation order (priority DESC, id), without a sort.
CREATE INDEX tenant_policies_by_tenant ON tenant_policies (tenant_id, priority DESC, id);

-- Append-only. `seq` orders entries written in the same microsecond; `details` is a JSON object.
CREATE TABLE audit_log (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    id        TEXT NOT NULL UNIQUE,
    timestamp INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    role      TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    action    TEXT NOT NULL,
    resource  TEXT NOT NULL,
    outcome   TEXT NOT NULL,
    details   TEXT NOT NULL
) STRICT;

-- Both are read backwards: newest first (timestamp DESC, seq DESC), a time range as the index
-- range, the limit ending the scan early. One per tenant, one over every tenant.
CREATE INDEX audit_log_by_tenant_time ON audit_log (tenant_id, timestamp, seq);
CREATE INDEX audit_log_by_time ON audit_log (timestamp, seq);
