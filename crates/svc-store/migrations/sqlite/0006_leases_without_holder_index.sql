-- Every spawn and every end writes its sandbox's lease; an index on the holder made each of
-- those writes touch a second B-tree. Only the heartbeat's renew-all (every
-- worker.heartbeat_interval) and diagnostics read leases by holder, and a scan serves them.
DROP INDEX leases_by_holder;
