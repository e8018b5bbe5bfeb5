-- The seams issue: sandboxes have a `creating` state, and ended ones (`destroyed`, `error`) say
-- why. `ended_at` is when a sandbox ended in either way; retention purges by it.
ALTER TABLE sandboxes ADD COLUMN state_reason TEXT;
ALTER TABLE sandboxes ADD COLUMN state_message TEXT;
ALTER TABLE sandboxes ADD COLUMN ended_at INTEGER;
UPDATE sandboxes SET ended_at = destroyed_at, state_reason = 'destroyed_by_request', state_message = ''
    WHERE state = 'destroyed';
DROP INDEX sandboxes_by_destroyed;
CREATE INDEX sandboxes_by_ended ON sandboxes (ended_at) WHERE ended_at IS NOT NULL;
-- No index for the start-up recovery query (`state = 'creating' AND worker_id = ?`): it runs
-- once per start and `sandboxes_by_state_expiry` narrows it to the few `creating` rows, while
-- every state change would pay for one more index.
