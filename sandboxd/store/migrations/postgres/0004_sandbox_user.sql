-- ../0004_sandbox_user.sql: a sandbox's default user and working directory.
ALTER TABLE sandboxes ADD COLUMN default_user text;
ALTER TABLE sandboxes ADD COLUMN default_workdir text;
