"""A sandbox's log lines: its own journal (systemd's boot and every unit's output, envd's
included), read from the host with journalctl over the journal directory inside the sandbox
(`/run/log/journal` of its mount namespace, through /proc/LEADER/root: no command runs in the
sandbox, and a paused one can be read too). The journal is volatile and capped at 8 MiB
(sandboxd/host/base_image.py), so a read takes milliseconds."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.errors import HostError, SandboxError

if TYPE_CHECKING:
    from sandboxd.host.runtime import Box

# syslog priorities as E2B's log levels
LEVELS = {0: "error", 1: "error", 2: "error", 3: "error", 4: "warn", 5: "info", 6: "info",
          7: "debug"}  # fmt: skip
# envd writes `logger=NAME message` (envd/logs.py)
_ENVD_LOGGER = re.compile(r"^logger=(\S+) ")


@dataclass(frozen=True)
class LogEntry:
    timestamp_us: int
    level: str
    logger: str  # envd's logger, or the process that wrote it (systemd, envd, ...)
    message: str


def read(box: Box, since_us: int | None, until_us: int | None, limit: int,
         newest_first: bool) -> list[LogEntry]:  # fmt: skip
    """At most `limit` entries in [since_us, until_us], oldest first, or newest first.

    Raises:
        HostError: journalctl is missing.
        SandboxError: the sandbox is gone or its journal cannot be read.
    """
    if shutil.which("journalctl") is None:
        raise HostError("journalctl is missing (scripts/install installs systemd)")
    journals = Path(f"/proc/{box.leader_pid}/root/run/log/journal")
    try:
        directories = [d for d in journals.iterdir() if d.is_dir()]
    except OSError as exc:
        raise SandboxError(f"sandbox {box.id}: no journal to read ({exc.strerror})") from exc
    entries: list[LogEntry] = []
    for directory in directories:
        argv = ["journalctl", "--directory", str(directory), "--output", "json", "--no-pager",
                "--output-fields", "MESSAGE,PRIORITY,SYSLOG_IDENTIFIER"]  # fmt: skip
        if since_us is not None:
            argv += ["--since", f"@{since_us / 1e6:.6f}"]
        if until_us is not None:
            argv += ["--until", f"@{until_us / 1e6:.6f}"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SandboxError(f"sandbox {box.id}: journalctl: {done.stderr.strip()[:200]}")
        entries += [_entry(json.loads(line)) for line in done.stdout.splitlines() if line]
    entries.sort(key=lambda e: e.timestamp_us, reverse=newest_first)
    return entries[:limit]


def _entry(record: dict[str, object]) -> LogEntry:
    message = record.get("MESSAGE", "")
    if isinstance(message, list):  # binary data: journalctl gives the bytes
        message = bytes(message).decode(errors="replace")
    message = str(message)
    logger = str(record.get("SYSLOG_IDENTIFIER", ""))
    if found := _ENVD_LOGGER.match(message):
        logger, message = found.group(1), message[found.end() :]
    priority = str(record.get("PRIORITY", "6"))
    level = LEVELS.get(int(priority), "info") if priority.isdigit() else "info"
    return LogEntry(int(str(record["__REALTIME_TIMESTAMP"])), level, logger, message)
