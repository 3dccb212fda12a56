"""Reading a file of an image's tree on the host, where the image chose what is at the path:
never following a link out of the tree (openat2 RESOLVE_IN_ROOT) nor at the last component,
opened without blocking (a FIFO would hold a build's thread, and with both build slots taken
every build, for ever), regular files only, and never more than a cap (a "libc" of any size
would otherwise be read whole into memory)."""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host import libc

if TYPE_CHECKING:
    from pathlib import Path


class NotRegularFile(TemplateError):
    """The image has something else than a regular file at the path (a FIFO, a link...)."""


_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


def read_capped(root: Path, relative: str, shown: str, cap: int) -> bytes:
    """The contents of `relative` (links already resolved as the image sees them) under the
    tree `root`; `shown` names it in errors (the image's own path).

    Raises:
        FileNotFoundError: there is nothing at that path.
        NotRegularFile: it is not a regular file (a FIFO, a socket, a link).
        TemplateError: it holds more than `cap` bytes.
    """
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = libc.open_in_root(root_fd, relative, _FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENOTDIR):
            raise NotRegularFile(f"the image's {shown} is not a regular file") from e
        raise
    finally:
        os.close(root_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"the image's {shown} is not a regular file")
        data = bytearray()
        while len(data) <= cap and (chunk := os.read(fd, min(_CHUNK, cap + 1 - len(data)))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > cap:
        raise TemplateError(
            f"the image's {shown} is larger than {cap >> 20} MiB, the most a build reads of it"
        )
    return bytes(data)
