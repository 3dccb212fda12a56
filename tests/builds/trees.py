"""Root trees of images that are not ours, made by the tests from this host's Debian: a busybox
one (Debian's busybox, /bin/sh a link to it, and the glibc libraries from the host, as Docker's
busybox:glibc has them), an Alpine-like one (only musl's loader) and one without /bin/sh."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

MULTIARCH = "lib/x86_64-linux-gnu"


def _package_libraries(package: str) -> list[str]:
    """The shared libraries the host's Debian package installs directly in /lib/MULTIARCH."""
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True)
    return [
        line for line in listed.stdout.splitlines()
        if line.startswith(f"/{MULTIARCH}/") and ".so" in line and line.count("/") == 3
    ]  # fmt: skip


def glibc_tree(root: Path, *, with_sh: bool = True) -> None:
    """`root`: glibc's libraries (and GCC's runtime, which the envd artifact needs too) in
    /lib/MULTIARCH, the loader linked from /lib64 by an absolute link, /etc/passwd, /etc/group
    and /etc/shadow with root only, and (`with_sh`) busybox as /bin/sh and its applets."""
    (root / MULTIARCH).mkdir(parents=True)
    for library in _package_libraries("libc6") + _package_libraries("libgcc-s1"):
        shutil.copy2(library, root / MULTIARCH, follow_symlinks=True)
    (root / "lib64").mkdir()
    (root / "lib64/ld-linux-x86-64.so.2").symlink_to(f"/{MULTIARCH}/ld-linux-x86-64.so.2")
    for name in ("root", "tmp", "etc"):
        (root / name).mkdir(mode=0o700 if name == "root" else 0o755)
    (root / "tmp").chmod(0o1777)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/shadow").write_text("root:*:19000:0:99999:7:::\n")
    (root / "etc/shadow").chmod(0o640)
    (root / "bin").mkdir()
    if with_sh:
        shutil.copy2(shutil.which("busybox") or "/usr/bin/busybox", root / "bin/busybox")
        applets = subprocess.run(["busybox", "--list"], capture_output=True, text=True, check=True)
        for applet in applets.stdout.split():
            if applet != "busybox":
                (root / "bin" / applet).symlink_to("busybox")


def alpine_like_tree(root: Path) -> None:
    """Only what tells a musl image: its loader (and a shell, so glibc is what is missing)."""
    (root / "lib").mkdir(parents=True)
    (root / "lib/ld-musl-x86_64.so.1").write_bytes(b"\x7fELF")
    (root / "bin").mkdir()
    (root / "bin/sh").symlink_to("/bin/busybox")
    (root / "bin/busybox").write_bytes(b"\x7fELF")
