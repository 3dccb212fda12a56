"""sandboxd's persistent state: keys, templates, sandboxes, metric samples, events and builds,
behind one interface (`interface.Store`, its rows in `rows`); SQLite (WAL) the default and so
far the only backend (`sqlite/`), its schema in `migrations/`."""
