"""What the systemd provisioning tests install from: a flat Debian repository of systemd's set
(sandboxd.builds.systemd_init.PACKAGES and every package they depend on, as this host's apt
resolves them: fetched once with `apt-get download` and cached by that list, as the debootstrap
stage is), indexed with dpkg-scanpackages and a Release file of its own (unsigned: sources name
it `[trusted=yes]`); and an image without any of systemd's set: the debootstrap stage with
systemd, D-Bus and sudo purged, its apt sources pointing at the repository only, so that a
build's provisioning must install them from there."""

from __future__ import annotations

import email.utils
import fcntl
import hashlib
import shutil
import subprocess
from typing import TYPE_CHECKING

from sandboxd.builds.base_image import ensure_stage
from sandboxd.builds.systemd_init import PACKAGES
from sandboxd.host.removal import remove_tree

if TYPE_CHECKING:
    from pathlib import Path

# Purged from the stage: what provisioning installs and nothing else depends on.
PURGED = ("systemd", "systemd-sysv", "libsystemd-shared", "dbus", "dbus-bin", "dbus-daemon",
          "dbus-session-bus-common", "dbus-system-bus-common", "sudo")  # fmt: skip
REPO_PATH = "debian"  # under the fake internet's index root: http://INDEX_ADDRESS/debian/
RECIPE = f"{' '.join(PACKAGES)} v1"
_DEPENDS = ("apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
            "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances")  # fmt: skip


def ensure_debs(cache: Path) -> Path:
    """`cache/debs`: the .debs of PACKAGES and their dependencies with their Packages index,
    downloaded when absent or made for another package list (concurrent callers wait)."""
    cache.mkdir(parents=True, exist_ok=True)
    debs = cache / "debs"
    with open(cache / ".debs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        recipe = debs / ".recipe"
        if recipe.is_file() and recipe.read_text() == RECIPE:
            return debs
        new = cache / "debs.new"
        remove_tree(new)
        new.mkdir()
        listed = _run([*_DEPENDS, *PACKAGES], new).splitlines()
        names = sorted({line for line in listed if line[:1].isalnum()})
        _run(["apt-get", "download", *names], new)
        packages = _run(["dpkg-scanpackages", "--multiversion", "."], new)
        (new / "Packages").write_text(packages)
        (new / "Release").write_text(_release(packages.encode()))
        (new / ".recipe").write_text(RECIPE)
        remove_tree(debs)
        new.rename(debs)
        return debs


def serve_repo(debs: Path, index_root: Path, address: str) -> str:
    """The repository copied under the index root (served at `address`); the sources.list
    line naming it."""
    dest = index_root / REPO_PATH
    if not dest.is_dir():
        shutil.copytree(debs, dest)
    return f"deb [trusted=yes] http://{address}/{REPO_PATH}/ ./\n"


def no_systemd_tree(cache: Path, dest: Path, sources: str) -> None:
    """The stage at `dest` with PURGED purged and `sources` as its only apt source."""
    stage = ensure_stage(cache)
    subprocess.run(["cp", "-a", "--reflink=auto", str(stage), str(dest)], check=True)
    # sudo's prerm refuses without a root password unless told (its SUDO_FORCE_REMOVE).
    subprocess.run(["chroot", str(dest), "dpkg", "--purge", "--force-remove-essential",
                    "--force-remove-protected", "--force-depends", *PURGED],
                   env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SUDO_FORCE_REMOVE": "yes"},
                   check=True, capture_output=True)  # fmt: skip
    for listed in (dest / "etc/apt/sources.list.d").glob("*"):
        listed.unlink()
    (dest / "etc/apt/sources.list").write_text(sources)
    for cached in (dest / "var/lib/apt/lists").glob("*_*"):
        cached.unlink()


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{argv[:3]} failed: {done.stderr[-2000:]}"
    return done.stdout


def _release(packages: bytes) -> str:
    digest = hashlib.sha256(packages).hexdigest()
    return (f"Origin: sandboxd-tests\nLabel: sandboxd-tests\n"
            f"Date: {email.utils.formatdate(usegmt=True)}\n"
            f"SHA256:\n {digest} {len(packages)} Packages\n")  # fmt: skip
