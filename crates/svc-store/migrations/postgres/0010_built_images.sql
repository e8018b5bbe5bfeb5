-- Images template builds made (decisions §17), by the worker whose engine holds them, kept
-- until they are removed from that engine: what the collection of unused built images looks at
-- (build records are trimmed, images may outlive them).
CREATE TABLE built_images (
    image     TEXT PRIMARY KEY,
    worker_id TEXT NOT NULL,
    built_at  BIGINT NOT NULL
);

CREATE INDEX built_images_by_worker ON built_images (worker_id);
