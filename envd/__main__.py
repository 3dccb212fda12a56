from __future__ import annotations

from envd.cli import main

raise SystemExit(main())
