"""sandboxd's control REST API (E2B's): Starlette routes over the node service and the store."""
