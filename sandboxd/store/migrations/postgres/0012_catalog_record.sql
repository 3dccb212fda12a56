-- ../0012_catalog_record.sql: a disk-paused sandbox's record in the catalog.
ALTER TABLE sandbox_catalog ADD COLUMN record text;
ALTER TABLE sandbox_catalog ADD COLUMN unmovable text
