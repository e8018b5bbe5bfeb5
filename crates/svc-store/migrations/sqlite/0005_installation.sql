-- One random ID per database: runtimes are labelled with it, so reconciliation adopts only
-- runtimes this deployment made, never another's on a shared engine.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('installation_id', lower(hex(randomblob(16))));
