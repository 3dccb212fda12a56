"""OS users: passwd/group lookups and the reference envd's path resolution rules."""

from __future__ import annotations

import grp
import os
import posixpath
import pwd
from dataclasses import dataclass


class UnknownUserError(LookupError):
    """No passwd entry for the requested user name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"user: unknown user {name}")
        self.name = name


@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: int
    gid: int
    # Primary gid first, then every group that lists the user (as Go envd's credentials).
    groups: tuple[int, ...]
    home: str


def lookup_user(name: str) -> User:
    """Look a user up in the passwd and group databases.

    Raises:
        UnknownUserError: there is no such user.
    """
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: embedded NUL
        raise UnknownUserError(name) from None
    try:
        extra = os.getgrouplist(name, entry.pw_gid)
    except OSError:
        extra = [entry.pw_gid]
    groups = tuple(dict.fromkeys([entry.pw_gid, *extra]))
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def expand_path(path: str, user: User, default_workdir: str | None) -> str:
    """Resolve a client path as the reference envd does.

    Empty means the default workdir (if set); `~` and `~/x` are the user's home; absolute paths
    are returned as given, uncleaned; anything relative is joined onto the home and normalised
    (onto the home, not the default workdir).

    Raises:
        ValueError: `~name` (another user's home) or a path containing a NUL byte.
    """
    if "\x00" in path:
        raise ValueError("path contains a NUL byte")
    if not path and default_workdir:
        path = default_workdir
    if path.startswith("~"):
        rest = path[1:]
        if rest and rest[0] not in "/\\":
            raise ValueError("cannot expand user-specific home dir")
        path = posixpath.join(user.home, rest.lstrip("/\\"))
    if posixpath.isabs(path):
        return path
    return posixpath.normpath(posixpath.join(user.home, path))


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def ensure_dirs(path: str, user: User) -> None:
    """Create every missing directory of `path` (mode 0755) owned by the user.

    Existing directories, and symlinks to them, are left as they are. Concurrent creators are
    tolerated: whoever wins, the directory ends up owned by the user.

    Raises:
        NotADirectoryError: an ancestor exists and is not a directory ("path is a file").
        OSError: mkdir or chown failed.
    """
    parts = [p for p in path.split("/") if p]
    current = "/" if path.startswith("/") else ""
    for part in parts:
        current = posixpath.join(current, part) if current else part
        if os.path.isdir(current):
            continue
        if os.path.lexists(current) and not os.path.isdir(current):
            raise NotADirectoryError(f"path is a file: {current}")
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            if not os.path.isdir(current):
                raise NotADirectoryError(f"path is a file: {current}") from None
        os.chown(current, user.uid, user.gid)
