"""The node service: what the control API needs of one machine (create, kill, pause, resume,
connect, timeouts, listing, metrics, logs, network rules), as plain data in and out. `LocalNode`
is the one implementation, in-process over the lifecycle; a remote one satisfies the same
protocol."""
