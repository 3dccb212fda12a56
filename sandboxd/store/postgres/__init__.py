"""The PostgreSQL backend of sandboxd's store, a database on a server of its own (the ground for
sandboxds on several machines sharing one; today one serve per database):
`store.PostgresStore` over a `postgresql://` URL, its connections and writer in `database`, its
tables in `tables` and `build_tables`, its schema in sandboxd/store/migrations/postgres. Needs
psycopg (the `sandboxd[postgres]` extra), imported only when a PostgreSQL URL is given."""
