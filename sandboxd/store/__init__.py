"""sandboxd's persistent state: sandboxes, templates, builds, keys, events and metrics, behind
one interface; SQLite (WAL) the default backend, its schema in `migrations/`."""
