"""The C library, loaded once, for the few calls Python's os module lacks (inotify, statfs,
ioprio_set, mallopt, malloc_trim)."""

from __future__ import annotations

import ctypes
import os

# use_errno: errno_error() can then read the errno of the last call made through it.
libc = ctypes.CDLL(None, use_errno=True)


def errno_error(path: str | None = None) -> OSError:
    """The OSError for the errno a failed call through `libc` left (FileNotFoundError, ...)."""
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code), path)
