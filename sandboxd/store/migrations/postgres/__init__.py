"""The PostgreSQL twins of the store's migrations (see sandboxd.store.postgres): one file per
number of the SQLite ones, the same tables and columns in PostgreSQL's types."""
