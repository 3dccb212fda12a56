"""sandboxd's control REST API (E2B's): Starlette routes over the sandbox manager and store."""
