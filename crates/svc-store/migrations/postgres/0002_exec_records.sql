-- Exec records (decisions §8), kept so a restart can list them: `record` is the API's JSON,
-- `handle` the provider's own reference to the command (a docker exec ID), when it has one.
-- `seq` orders records that started in the same microsecond by when they were first saved.
CREATE TABLE exec_records (
    seq        BIGSERIAL PRIMARY KEY,
    exec_id    TEXT NOT NULL UNIQUE,
    sandbox_id TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    ended      BOOLEAN NOT NULL,
    handle     TEXT,
    record     TEXT NOT NULL
);

-- A sandbox's records newest first (trimming, deleting with the sandbox).
CREATE INDEX exec_records_by_sandbox ON exec_records (sandbox_id, ended, started_at, seq);
