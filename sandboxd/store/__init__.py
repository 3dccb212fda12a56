"""sandboxd's persistent state: keys, templates, sandboxes, metric samples, events and builds,
behind one interface (`interface.Store`, its rows in `rows`); SQLite (WAL) the default backend
(`sqlite/`), PostgreSQL a database on a server of its own (`postgres/`, the ground for several
machines); their schemas in `migrations/` and `migrations/postgres/`, one numbering, each SQLite
file with its PostgreSQL twin."""
