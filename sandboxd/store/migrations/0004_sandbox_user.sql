-- A sandbox's default user and working directory, which envd's /init gets (again at each
-- resume): its template's (a build's last USER and WORKDIR); NULL: E2B's `user` and /home/user.
ALTER TABLE sandboxes ADD COLUMN default_user TEXT;
ALTER TABLE sandboxes ADD COLUMN default_workdir TEXT
