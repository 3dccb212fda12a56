from __future__ import annotations

import gc

# Start-up makes some 70,000 container objects that all live as long as envd (modules, classes,
# functions); collecting while they pile up frees nothing and costs 5-10 % of the
# start-up's CPU. envd.server.serve freezes them and turns the collector back on.
gc.disable()

from envd.cli import main  # after the collector is off: importing it is the start-up

raise SystemExit(main())
