-- Warm pools (decisions §17): how many started runtimes a template keeps ready.
ALTER TABLE templates ADD COLUMN warm_pool INTEGER NOT NULL DEFAULT 0;
