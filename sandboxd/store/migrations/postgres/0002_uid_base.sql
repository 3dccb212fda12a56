-- ../0002_uid_base.sql: the first host uid of each sandbox's range.
ALTER TABLE sandboxes ADD COLUMN uid_base bigint;
