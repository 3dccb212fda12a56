"""A place where fuzzing envd cannot hurt the machine: a throwaway user whose home is inside a
fresh temp dir, and an envd that runs as that user (not as root), so the kernel itself refuses
anything that user may not do. Generated paths are confined to the sandbox as well (safety.py).

Layout of the temp dir (root-owned 0755, so the user can neither remove nor rename its parts):

    home/      the user's home: relative paths and `~` land here
    scratch/   where generated absolute paths point (besides home/)
    daemon/    the daemon's own HOME (its spawn-helper cache); never a generated path
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import httpx

from tests.envd_process import EnvdProcess, start_envd

if TYPE_CHECKING:
    from collections.abc import Iterator

# Every fuzzed request carries this token unless it fuzzes the token itself; /init can only
# ever replace it with itself (a token, once set, must be repeated to change anything).
FUZZ_TOKEN: Final = "fuzz-token"  # noqa: S105  # a test token


@dataclass
class Sandbox:
    root: Path
    home: Path
    scratch: Path
    username: str
    uid: int
    gid: int
    log_dir: Path
    daemon: EnvdProcess | None = None
    # Every daemon started for this sandbox (one more after each crash), for the log checks.
    daemons: list[EnvdProcess] = field(default_factory=list)

    @property
    def roots(self) -> tuple[str, str]:
        """Where generated paths may point."""
        return str(self.home), str(self.scratch)

    def restore_dirs(self) -> None:
        """Recreate home/ and scratch/ (a fuzzed Remove may empty them) as the user's."""
        for d in (self.home, self.scratch):
            d.mkdir(mode=0o755, exist_ok=True)
            os.chown(d, self.uid, self.gid)

    def running(self) -> EnvdProcess:
        """The sandbox's daemon, started again if the last one died (the death itself is
        reported by the check of the request that caused it)."""
        if self.daemon is None or self.daemon.proc.poll() is not None:
            self.daemon = _start_daemon(self)
            self.daemons.append(self.daemon)
        return self.daemon

    def kill_children(self) -> None:
        """Processes left by the last example (a `cat` stays until its stdin closes)."""
        kill_user_processes(self.uid, keep=self.running().pid)

    def reset_state(self, client: httpx.Client) -> None:
        """The /init state every example starts from: the token, and the throwaway user as
        default user (so relative paths resolve inside the sandbox)."""
        _init(client, self.running(), self.username)


def _start_daemon(sandbox: Sandbox) -> EnvdProcess:
    daemon_home = sandbox.root / "daemon"
    daemon = start_envd(
        sandbox.log_dir,
        env={"HOME": str(daemon_home)},
        as_user=(sandbox.uid, sandbox.gid),
    )
    with httpx.Client() as client:
        _init(client, daemon, sandbox.username)
    return daemon


def _init(client: httpx.Client, daemon: EnvdProcess, username: str) -> None:
    body = {"accessToken": FUZZ_TOKEN, "defaultUser": username}
    r = client.post(
        daemon.url + "/init", json=body, headers={"X-Access-Token": FUZZ_TOKEN}, timeout=10
    )
    assert r.status_code == 204, f"/init failed: {r.status_code} {r.text}"


def _create_user(root: Path) -> tuple[str, int, int]:
    name = f"envdfuzz{secrets.token_hex(4)}"
    home = root / "home"
    subprocess.run(
        [
            "useradd",
            "--no-create-home",
            "--no-log-init",
            "--user-group",
            "--home-dir",
            str(home),
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(name)
    return name, entry.pw_uid, entry.pw_gid


def _blocking_dirs(uid: int) -> list[Path]:
    """Directories on the way to the interpreter, the virtualenv and the repo that others may
    not enter (a pyenv Python under a 0700 /root, say)."""
    needed = {sys.base_prefix, sys.prefix, os.path.realpath(sys.executable)}
    needed.add(str(Path(__file__).resolve().parents[2]))
    blocking: set[Path] = set()
    for target in needed:
        for d in [*Path(target).parents, Path(target)]:
            with contextlib.suppress(OSError):
                st = d.stat()
                if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH and st.st_uid != uid:
                    blocking.add(d)
    return sorted(blocking)


def _extended_acl_entries(d: Path) -> list[str]:
    """The named user and group entries (and mask) of the directory's ACL: empty when it has
    only the permission bits."""
    listing = subprocess.run(
        ["getfacl", "--absolute-names", "--omit-header", "--numeric", str(d)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in listing.splitlines()
            if line.startswith("mask::") or line.split(":")[1:2] not in ([""], [])]  # fmt: skip


def _grant_traversal(dirs: list[Path], uid: int) -> list[tuple[Path, bool]]:
    """Search (x) permission only, through an ACL entry: the user can reach the Python files
    below these directories but cannot list, read or change anything in them. Returns each
    directory with whether it had an extended ACL before, for _revoke_traversal."""
    granted = []
    for d in dirs:
        had_acl = bool(_extended_acl_entries(d))
        subprocess.run(["setfacl", "-m", f"u:{uid}:x", str(d)], check=True, capture_output=True)
        granted.append((d, had_acl))
    return granted


def _revoke_traversal(granted: list[tuple[Path, bool]], uid: int) -> None:
    """Removes only this user's entry (another run may have its own on the same directory), and
    the ACL altogether where there was none before and no other entry is left."""
    for d, had_acl in granted:
        subprocess.run(["setfacl", "-x", f"u:{uid}", str(d)], check=True, capture_output=True)
        left = _extended_acl_entries(d)
        if not had_acl and all(line.startswith("mask::") for line in left):
            subprocess.run(["setfacl", "-b", str(d)], check=True, capture_output=True)


def kill_user_processes(uid: int, keep: int | None = None) -> None:
    """Children the daemon started as the user and left behind, killed by pid (nothing else
    runs as this fresh user); `keep` is the daemon's own pid."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != keep:
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    os.kill(int(entry), signal.SIGKILL)


@contextlib.contextmanager
def throwaway_sandbox(log_dir: Path) -> Iterator[Sandbox]:
    """The sandbox, with its daemon running; everything is removed afterwards, on failure too."""
    root = Path(tempfile.mkdtemp(prefix="envd-fuzz-"))
    root.chmod(0o755)
    try:
        name, uid, gid = _create_user(root)
    except BaseException:
        shutil.rmtree(root)
        raise
    sandbox = Sandbox(root, root / "home", root / "scratch", name, uid, gid, log_dir)
    granted: list[tuple[Path, bool]] = []
    try:
        granted = _grant_traversal(_blocking_dirs(uid), uid)
        sandbox.restore_dirs()
        (root / "daemon").mkdir(mode=0o700)
        os.chown(root / "daemon", uid, gid)
        sandbox.running()
        yield sandbox
    finally:
        for daemon in sandbox.daemons:
            daemon.stop()
        kill_user_processes(uid)
        subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        _revoke_traversal(granted, uid)
