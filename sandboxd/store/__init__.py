"""sandboxd's persistent state: keys, templates, sandboxes, metric samples, events and builds,
behind one interface (`interface.Store`, its rows in `rows`); SQLite (WAL) the default backend
(`sqlite/`), PostgreSQL the one for a database shared by several machines (`postgres/`); their
schemas in `migrations/` and `migrations/postgres/`, one numbering, each SQLite file with its
PostgreSQL twin."""
