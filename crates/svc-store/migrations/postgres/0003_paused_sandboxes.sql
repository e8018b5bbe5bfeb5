-- Pause and resume (decisions §7): the `paused` state, when a sandbox was paused, and the time
-- spent paused before, which neither expiry nor the maximum lifetime counts. A paused sandbox
-- still holds its runtime, so the admission index covers it too.
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_state_check;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_state_check
    CHECK (state IN ('creating', 'running', 'paused', 'destroyed', 'error'));
ALTER TABLE sandboxes ADD COLUMN paused_at BIGINT;
ALTER TABLE sandboxes ADD COLUMN paused_micros BIGINT NOT NULL DEFAULT 0 CHECK (paused_micros >= 0);
DROP INDEX sandboxes_holding_by_owner;
CREATE INDEX sandboxes_holding_by_owner ON sandboxes (owner_id)
    WHERE state IN ('creating', 'running', 'paused');
