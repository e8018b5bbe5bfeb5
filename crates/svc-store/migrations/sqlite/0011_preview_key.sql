-- Previews (decisions §18): the random key preview tokens are signed with, one per database, so
-- every replica accepts the tokens any of them issued.
INSERT INTO meta (key, value) VALUES ('preview_key', lower(hex(randomblob(32))));
