"""Logging to stderr, one line per event; journald priority prefixes when under systemd."""

from __future__ import annotations

import logging
import sys
from typing import Final

from envd.systemd import under_journald

# syslog priorities journald reads from a "<N>" line prefix.
_PRIORITY: Final = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class _JournalFormatter(logging.Formatter):
    """journald stamps time itself: prefix the priority and leave the timestamp out."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITY.get(record.levelno, 6)
        line = f"<{priority}>logger={record.name} {record.getMessage()}"
        if record.exc_info:
            # One event, one journal entry: keep the traceback on the same record.
            line += " " + self.formatException(record.exc_info).replace("\n", " | ")
        return line


class _PlainFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s logger=%(name)s %(message)s")

    def formatException(self, ei: object) -> str:
        return super().formatException(ei).replace("\n", " | ")  # type: ignore[arg-type]  # ei is an exc_info tuple


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JournalFormatter() if under_journald() else _PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # uvicorn narrates its lifecycle at INFO ("Started server process", "Waiting for
    # application startup" ...); envd logs its own start and stop, so keep only its warnings.
    logging.getLogger("uvicorn.error").setLevel(logging.DEBUG if verbose else logging.WARNING)
