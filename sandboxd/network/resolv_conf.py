"""A sandbox's /etc/resolv.conf: at boot its gateway (serve's DNS forwarder), written into the
writable layer (sandboxd.runtime.nspawn.steps.Resolver); at create, when the create names `dnsServers`,
those instead, written through the sandbox's root from the host (a warm sandbox was booted
before its create's options were known).

The root is the sandbox's, whatever its template or user made of it: the write follows no
symbolic link (`etc` is opened without following one, and the file is a new one renamed over
whatever `resolv.conf` was, a link included), so it lands in the sandbox's /etc or nowhere.
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

NAME = "resolv.conf"


def text(nameservers: Iterable[str]) -> str:
    return "".join(f"nameserver {address}\n" for address in nameservers)


def rewrite(root: Path, nameservers: Iterable[str], uid: int) -> None:
    """`root/etc/resolv.conf` replaced at once by one naming `nameservers`, owned by `uid` (the
    sandbox's root), mode 0644.

    Raises:
        OSError: the sandbox has no /etc directory of its own (a link, or nothing), or the
            rename was refused (e.g. resolv.conf is a directory).
    """
    etc = os.open(root / "etc", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        tmp = f".{NAME}.{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=etc)  # fmt: skip
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text(nameservers))
                os.fchown(f.fileno(), uid, uid)
                os.fchmod(f.fileno(), 0o644)
            os.rename(tmp, NAME, src_dir_fd=etc, dst_dir_fd=etc)
        except BaseException:
            os.unlink(tmp, dir_fd=etc)
            raise
    finally:
        os.close(etc)
