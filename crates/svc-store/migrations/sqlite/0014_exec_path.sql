-- Docker fast path (decisions §14): how svc reaches a sandbox's commands and files, `agent` or
-- `engine`; NULL for providers with one way.
ALTER TABLE sandboxes ADD COLUMN exec_path TEXT;
