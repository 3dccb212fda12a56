from __future__ import annotations

from sandboxd.cli import main

raise SystemExit(main())
