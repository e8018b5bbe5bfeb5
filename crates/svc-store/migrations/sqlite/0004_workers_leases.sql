-- The workers issue: the worker registry and durable leases (decisions §11). A lease row is kept
-- after release (expired), so a resource's generation never goes back; rows go with their
-- sandbox's record when it is purged.
CREATE TABLE workers (
    id                      TEXT PRIMARY KEY NOT NULL,
    hostname                TEXT NOT NULL,
    status                  TEXT NOT NULL,
    providers               TEXT NOT NULL,
    capabilities            TEXT NOT NULL,
    max_sandboxes           INTEGER NOT NULL CHECK (max_sandboxes >= 0),
    max_sandboxes_per_owner INTEGER NOT NULL CHECK (max_sandboxes_per_owner >= 0),
    url                     TEXT,
    last_heartbeat          INTEGER NOT NULL,
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE leases (
    resource_id TEXT PRIMARY KEY NOT NULL,
    holder_id   TEXT NOT NULL,
    generation  INTEGER NOT NULL CHECK (generation >= 1),
    expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX leases_by_holder ON leases (holder_id, expires_at);
