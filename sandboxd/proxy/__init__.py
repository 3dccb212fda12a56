"""sandboxd's one listener and the sandbox proxy behind it: the connection policy, which
sandbox and port a request is for (routing), the relay of requests and responses below ASGI,
and the kept-alive connections to ports inside sandboxes (upstream)."""
