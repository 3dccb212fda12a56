-- ../0005_disk_pause.sql: a paused sandbox's mode, and what a resume from disk boots.
ALTER TABLE sandboxes ADD COLUMN pause_mode text;
ALTER TABLE sandboxes ADD COLUMN disk_image jsonb;
