"""Talking to envd inside a sandbox, sandboxd's one way to it: one `client.EnvdClient` (the
connection pool, and which sandbox is reachable through which dialer) that serve makes and hands
in; `/init` (`init`), `/metrics` (`metrics`), commands through envd's process API (`commands`
over `connect_stream`), a template's start and ready commands (`start_cmd`), and the readiness
probe."""
