"""sandboxd: E2B's control API and sandbox proxy on one port, running each sandbox as a booted
systemd-nspawn container with envd inside. `api/` (HTTP) over `lifecycle/` (the sandboxes'
lives) over `host/` (what is made on the machine); `proxy/` beside the API; `templates`,
`store`, `ids`, `errors` and `envd_client` shared below the API."""
