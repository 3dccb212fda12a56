"""Putting sandboxd together: `serve` (the composition root, which makes every part and owns
the daemon's lifespan), the one listener serving the API and the proxy, the state directory,
TLS, and the systemd unit `install-service` writes."""
