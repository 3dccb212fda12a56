"""File metadata: the `user.e2b.*` extended attributes that uploads write and both APIs
report (the reference envd's names)."""

from __future__ import annotations

import os
from typing import Final

XATTR_PREFIX: Final = "user.e2b."


def read_metadata(file: str | int) -> dict[str, str]:
    """The `user.e2b.*` xattrs of a path (symlinks followed) or an open descriptor, prefix
    stripped. Best effort, as in Go: none when the filesystem has no xattrs, and a name or
    value that is not UTF-8, or cannot be read, is skipped."""
    try:
        names = os.listxattr(file)
    except OSError:
        return {}
    metadata: dict[str, str] = {}
    for name in names:
        if not name.startswith(XATTR_PREFIX):
            continue
        try:
            key = name[len(XATTR_PREFIX) :]
            key.encode("utf-8")  # surrogate-escaped: not UTF-8
            metadata[key] = os.getxattr(file, name).decode("utf-8")
        except (OSError, UnicodeError):
            continue
    return metadata
