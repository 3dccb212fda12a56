"""The sandboxes' lives as the control API sees them: create (from the warm pool or a boot,
then envd's /init), kill, pause, resume, connect and timeouts; the evictor that ends them; the
metrics sampler; adoption after a restart. Errors are sandboxd.errors' domain errors; the API
maps them to HTTP once."""
