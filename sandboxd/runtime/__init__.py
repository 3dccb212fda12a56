"""Running sandboxes: what a runtime engine must do (boot, freeze, thaw, kill, adopt, stats,
limits, export a sandbox's writable layer), and the engines behind it (nspawn, the one)."""
