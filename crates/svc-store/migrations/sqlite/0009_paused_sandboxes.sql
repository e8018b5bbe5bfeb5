-- Pause and resume (decisions §7): a paused sandbox remembers when it was paused, and the time
-- spent paused before, which neither expiry nor the maximum lifetime counts. The state column
-- has no CHECK here, so `paused` needs no table rebuild.
ALTER TABLE sandboxes ADD COLUMN paused_at INTEGER;
ALTER TABLE sandboxes ADD COLUMN paused_micros INTEGER NOT NULL DEFAULT 0;
