-- Templates belong to a tenant (decisions §30): NULL is a global template, which every tenant
-- sees. Names stay unique across tenants (the primary key), so one tenant's listing walks the
-- primary key in name order keeping the global templates and its own: no index of its own.
ALTER TABLE templates ADD COLUMN tenant_id TEXT COLLATE "C";
