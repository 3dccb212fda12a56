"""The systemd-nspawn engine: each sandbox a booted container in a user namespace of its own uid
range, its root an overlay of idmapped template layers over a writable layer, made and undone
as a list of steps driven by the sandbox's persisted record."""
