"""The SQLite (WAL) backend of sandboxd's store, the default: `store.SqliteStore` over the file
`database.DB_FILE` of the state directory, its connections and writer in `database`, its tables
in `tables` and `build_tables`."""
