-- Template builds (decisions §17): one row per build, and its NDJSON log lines in the order they
-- were appended (`seq`, shared by every build, orders them). `worker_id` is the replica running
-- it, so a restart fails what it was building.
CREATE TABLE template_builds (
    build_id   TEXT PRIMARY KEY,
    template   TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    status     TEXT NOT NULL,
    image      TEXT,
    started_at BIGINT NOT NULL,
    ended_at   BIGINT,
    error      TEXT
);

-- A template's builds newest first; the running builds of one replica.
CREATE INDEX template_builds_by_template ON template_builds (template, started_at);
CREATE INDEX template_builds_running ON template_builds (worker_id) WHERE status = 'running';

CREATE TABLE template_build_logs (
    seq      BIGSERIAL PRIMARY KEY,
    build_id TEXT NOT NULL,
    line     TEXT NOT NULL
);

CREATE INDEX template_build_logs_by_build ON template_build_logs (build_id, seq);
