-- Each sandbox runs in a user namespace of its own uid range: host uids uid_base ..
-- uid_base + 65535 (the same for gids). The sandbox's record on the host holds it too; NULL for
-- sandboxes from before user namespaces (none survive an upgrade: they are not adopted).
ALTER TABLE sandboxes ADD COLUMN uid_base INTEGER;
