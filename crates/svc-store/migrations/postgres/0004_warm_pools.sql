-- Warm pools (decisions §17): how many started runtimes a template keeps ready.
ALTER TABLE templates ADD COLUMN warm_pool BIGINT NOT NULL DEFAULT 0 CHECK (warm_pool >= 0);
