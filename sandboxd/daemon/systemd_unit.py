"""`sandboxd install-service`: packaging/sandboxd.service into /etc/systemd/system, its ExecStart
naming the sandboxd it runs from and the serve flags given. Does not start anything unless told."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from sandboxd.builds.base_image import packaging_dir
from sandboxd.errors import HostError

log = logging.getLogger("sandboxd.daemon.systemd_unit")

UNIT = "sandboxd.service"
UNIT_DIR = Path("etc/systemd/system")
STATE_DIR = "/var/lib/sandboxd"  # the unit's StateDirectory=sandboxd


def launcher() -> list[str]:
    """This installation's sandboxd: its console script, or its interpreter with -m."""
    script = Path(sysconfig.get_path("scripts")) / "sandboxd"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sandboxd"]


def unit_text(serve_flags: list[str]) -> str:
    """packaging/sandboxd.service with ExecStart running this sandboxd's serve."""
    command = shlex.join([*launcher(), "serve", "--state-dir", STATE_DIR, *serve_flags])
    lines = (packaging_dir() / UNIT).read_text().splitlines()
    return "".join(
        f"ExecStart={command}\n" if line.startswith("ExecStart=") else line + "\n" for line in lines
    )


def install_service(root: Path, serve_flags: list[str], enable: bool) -> Path:
    """Write the unit into `root`/etc/systemd/system; reload systemd when it runs this system.

    Args:
        root: the root file system ("/" for this system; another for an image being built).
        serve_flags: flags for `sandboxd serve` on the unit's ExecStart.
        enable: enable the unit (and start it, on a running system).

    Returns:
        The unit file written.

    Raises:
        HostError: not root, or systemctl failed.
    """
    if os.geteuid() != 0:
        raise HostError("installing the service needs root")
    path = root / UNIT_DIR / UNIT
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(UNIT + ".new")
    new.write_text(unit_text(serve_flags))
    new.chmod(0o644)
    new.rename(path)
    log.info("wrote %s", path)
    # systemd manages this system (not an image being built) when /run/systemd/system exists.
    running = root.resolve() == Path("/") and Path("/run/systemd/system").is_dir()
    if running:
        _systemctl("daemon-reload")
    if enable:
        _systemctl("enable", "--now", UNIT) if running else _systemctl(
            f"--root={root}", "enable", UNIT
        )
    elif running:
        log.info("start it with: systemctl enable --now %s", UNIT)
    return path


def _systemctl(*args: str) -> None:
    done = subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostError(f"systemctl {' '.join(args)} failed: {done.stderr.strip()}")
