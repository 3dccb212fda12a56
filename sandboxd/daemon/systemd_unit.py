"""`sandboxd install-service`: a role's unit from packaging/ into /etc/systemd/system, its
ExecStart naming the sandboxd it runs from, with the flags given after the unit's own: serve's
packaging/sandboxd.service, a node agent's and a gateway's packaging/systemd/ units. Does not
start anything unless told."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Final

from sandboxd.builds.base_image import packaging_dir
from sandboxd.errors import HostError

log = logging.getLogger("sandboxd.daemon.systemd_unit")

# Each role's unit, under packaging/: the one source the operators' guide copies from too.
UNITS: Final = {
    "serve": "sandboxd.service",
    "node": "systemd/sandboxd-node.service",
    "gateway": "systemd/sandboxd-gateway.service",
}
INSTALLED: Final = "/usr/local/bin/sandboxd"  # the units' program: this installation's instead
UNIT_DIR = Path("etc/systemd/system")


def launcher() -> list[str]:
    """This installation's sandboxd: its console script, or its interpreter with -m."""
    script = Path(sysconfig.get_path("scripts")) / "sandboxd"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sandboxd"]


def unit_name(role: str) -> str:
    return Path(UNITS[role]).name


def unit_text(role: str, flags: list[str]) -> str:
    """The role's unit with ExecStart running this sandboxd, `flags` after the unit's own (of
    a flag given twice, the last is taken)."""
    lines = (packaging_dir() / UNITS[role]).read_text().splitlines()
    return "".join(_with_launcher(line, flags) + "\n" for line in lines)


def _with_launcher(line: str, flags: list[str]) -> str:
    """`ExecStart=INSTALLED ARGS` as this sandboxd's, ARGS kept as written (for systemd to
    expand: `%H`, `${SANDBOXD_DATABASE_URL}`) and `flags` after them; any other line as it is."""
    program = f"ExecStart={INSTALLED} "
    if not line.startswith(program):
        return line
    own = line.removeprefix(program)
    return " ".join([f"ExecStart={shlex.join(launcher())}", own, *map(shlex.quote, flags)])


def install_service(root: Path, role: str, flags: list[str], enable: bool) -> Path:
    """Write the role's unit into `root`/etc/systemd/system; reload systemd when it runs this
    system.

    Args:
        root: the root file system ("/" for this system; another for an image being built).
        role: serve, node or gateway (UNITS).
        flags: flags for the role's command, after the unit's own on its ExecStart.
        enable: enable the unit (and start it, on a running system).

    Returns:
        The unit file written.

    Raises:
        HostError: not root, or systemctl failed.
    """
    if os.geteuid() != 0:
        raise HostError("installing the service needs root")
    unit = unit_name(role)
    path = root / UNIT_DIR / unit
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(unit + ".new")
    new.write_text(unit_text(role, flags))
    new.chmod(0o644)
    new.rename(path)
    log.info("wrote %s", path)
    # systemd manages this system (not an image being built) when /run/systemd/system exists.
    running = root.resolve() == Path("/") and Path("/run/systemd/system").is_dir()
    if running:
        _systemctl("daemon-reload")
    if role != "serve":
        log.info("the unit reads /etc/sandboxd/cluster.env: see its comments for what goes there")
    if enable:
        _systemctl("enable", "--now", unit) if running else _systemctl(
            f"--root={root}", "enable", unit
        )
    elif running:
        log.info("start it with: systemctl enable --now %s", unit)
    return path


def _systemctl(*args: str) -> None:
    done = subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HostError(f"systemctl {' '.join(args)} failed: {done.stderr.strip()}")
