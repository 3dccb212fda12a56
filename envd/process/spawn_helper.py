"""The spawn helper binary (spawn_helper.c): found or built once, at daemon start.

With it, a child is started by vfork + exec of a small static program that does the
reference's resets, drops privileges and enters the cwd, then execs the command: about 1 ms.
Without it (no C compiler), spawn.py forks and does the same steps in Python between fork and
exec, which costs several ms more per start (fork copies envd's page tables and the Python
code in the child touches copy-on-write pages).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

log = logging.getLogger("envd.process")

SOURCE: Final = Path(__file__).with_name("spawn_helper.c")
# "off" forces the Python fallback; a path names a prebuilt helper.
HELPER_ENV: Final = "ENVD_SPAWN_HELPER"
# Root-owned: the helper runs as root, so it must never live where others can write.
_ROOT_DIR: Final = Path("/var/lib/envd")
_BUILD_TIMEOUT_S: Final = 60


def _cache_dir() -> Path:
    if os.geteuid() == 0:
        return _ROOT_DIR
    return Path.home() / ".cache" / "envd"


def _compile(compiler: str, target: Path, *extra: str) -> bool:
    partial = target.with_suffix(f".tmp{os.getpid()}")
    command = [compiler, "-O2", *extra, "-o", str(partial), str(SOURCE)]
    try:
        result = subprocess.run(command, capture_output=True, timeout=_BUILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("cannot build the spawn helper: %s", exc)
        return False
    if result.returncode != 0:
        log.info("cannot build the spawn helper: %s", result.stderr.decode(errors="replace")[-500:])
        partial.unlink(missing_ok=True)
        return False
    partial.replace(target)  # atomic: concurrent daemons never see half a binary
    return True


def _trusted(path: Path) -> bool:
    """Ours and writable by nobody else: the helper runs with envd's privileges."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def ensure_helper() -> str | None:
    """The helper's path, building it on first use; None when unavailable (fallback)."""
    configured = os.environ.get(HELPER_ENV)
    if configured == "off":
        return None
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    target = _cache_dir() / f"spawn-helper-{digest}"
    if os.access(target, os.X_OK):
        return str(target) if _trusted(target) and _trusted(target.parent) else None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.info("no C compiler: children are started without the spawn helper")
        return None
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if not _trusted(target.parent):
        log.warning("%s is writable by others: not building the spawn helper there", target.parent)
        return None
    # Static when libc.a is there: no dynamic loader work on every start.
    # Builds of older sources are left alone: a daemon of that version may still use one.
    if _compile(compiler, target, "-static") or _compile(compiler, target):
        return str(target)
    return None
