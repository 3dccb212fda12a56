-- A paused sandbox's mode ("full": frozen in memory; "filesystem": on disk, NULL while running),
-- and for one on disk what its resume boots (JSON: its layers, its pause layers on top, init,
-- limits), so that a restarted sandboxd resumes it too.
ALTER TABLE sandboxes ADD COLUMN pause_mode TEXT;
ALTER TABLE sandboxes ADD COLUMN disk_image TEXT
