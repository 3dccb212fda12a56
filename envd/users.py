"""OS users: passwd/group lookups (cached briefly for requests), who a request runs as, and
the reference envd's path resolution rules."""

from __future__ import annotations

import base64
import binascii
import grp
import os
import posixpath
import pwd
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from envd.state import SandboxState


class UnknownUserError(LookupError):
    """No passwd entry for the requested user name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"user: unknown user {name}")
        self.name = name


class UnknownCallerError(Exception):
    """The user an RPC would run as (its Basic-auth user, or else the default user) does not
    exist; the message is the reference envd's."""


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


def basic_auth_username(authorization: str | None) -> str | None:
    """The user name of an `Authorization: Basic` header (password ignored), or None.

    Parsed as Go's Request.BasicAuth: "Basic " in any case, strict padded base64, and a colon
    required; "Basic Og==" names the empty user (which then fails the lookup, as in Go).
    """
    if not authorization or authorization[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(authorization[6:], validate=True)
    except binascii.Error:
        return None
    username, colon, _password = decoded.partition(b":")
    if not colon:
        return None
    return username.decode(errors="replace")


class UserCache:
    """Users looked up in the last second, shared by the Basic-auth check, every RPC and the
    /files routes (an SDK call would otherwise look its user up twice): a lookup costs 60-250 µs
    (passwd and group files, getgrouplist), as much as the rest of a Stat. Unknown names are
    not kept."""

    TTL_S: Final = 1.0

    def __init__(self, state: SandboxState) -> None:
        self._state = state
        self._users: dict[str, tuple[float, User]] = {}

    def lookup(self, name: str) -> User:
        """lookup_user(name), remembered for TTL_S.

        Raises:
            UnknownUserError: there is no such user.
        """
        now = time.monotonic()
        cached = self._users.get(name)
        if cached is not None and now - cached[0] < self.TTL_S:
            return cached[1]
        user = lookup_user(name)
        if len(self._users) > 64:  # many distinct names: start over rather than grow
            self._users.clear()
        self._users[name] = (now, user)
        return user

    def caller(self, authorization: str | None) -> User:
        """The user an RPC runs as: the Basic-auth user, else the default user.

        Raises:
            UnknownCallerError: that user does not exist.
        """
        username = basic_auth_username(authorization)
        if username is not None:
            try:
                return self.lookup(username)
            except UnknownUserError:
                raise UnknownCallerError(f"invalid username: '{username}'") from None
        try:
            return self.lookup(self._state.default_user)
        except UnknownUserError:
            raise UnknownCallerError(
                f"invalid default user: '{self._state.default_user}'"
            ) from None


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
    if os.path.isdir(path):  # every ancestor resolved to a directory on the way: done
        return
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
