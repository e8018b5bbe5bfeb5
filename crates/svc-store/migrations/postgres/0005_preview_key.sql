-- Previews (decisions §18): the random key preview tokens are signed with, one per database, so
-- every replica accepts the tokens any of them issued (two v4 UUIDs: 244 random bits).
INSERT INTO meta (key, value)
    VALUES ('preview_key', replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''));
