"""SQL migrations of the store, applied in the order of their numbers (see sandboxd.store.sqlite)."""
