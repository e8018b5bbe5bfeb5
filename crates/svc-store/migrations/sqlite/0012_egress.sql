-- Egress (decisions §18): what a sandbox (and a template's sandboxes) may connect to, as JSON
-- `{"mode": ..., "allow": [...]}`.
ALTER TABLE sandboxes ADD COLUMN egress TEXT NOT NULL DEFAULT '{"mode":"all","allow":[]}';
ALTER TABLE templates ADD COLUMN egress TEXT NOT NULL DEFAULT '{"mode":"all","allow":[]}';
