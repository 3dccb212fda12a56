"""Talking to envd inside a sandbox: the client over connections the runtime dials, the
readiness probe, `/init`, and commands run through envd's process API."""
