"""Reading a few files of a stack of layers from the host, without mounting it and without
following any of the image's links (an image's absolute link would point into the host):
the topmost layer that has the path decides, a whiteout (a 0/0 character device) hides it,
and a directory link on the way (Debian's `/bin` → `usr/bin`) is resolved inside the stack."""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from sandboxd.host import libc
from sandboxd.layers.image_files import NotRegularFile, read_capped

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

MAX_LINKS = 40  # as the kernel's path walk
MAX_TABLE_BYTES = 64 << 20  # the most read of /etc/passwd or /etc/group (a million accounts)
_NO_LINKS = libc.RESOLVE_IN_ROOT | libc.RESOLVE_NO_SYMLINKS


def _entry(layers: Sequence[Path], rel: str) -> tuple[Path, os.stat_result] | None:
    """The topmost layer holding `rel` (no link followed) and its lstat, or None (absent,
    whited out).

    A link on the way in a layer is not followed either: one above hides it (the caller
    resolved the image's links), and a lower layer's absolute link would lead into the host."""
    for layer in reversed(layers):
        try:
            fd = _open_in(layer, rel, os.O_PATH | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # ELOOP: a link on the
                continue  # way, hidden in the image by a directory above
            raise
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            return None
        return layer, st
    return None


def _open_in(layer: Path, rel: str, flags: int) -> int:
    """An fd of `rel` in `layer`, no link on the way followed."""
    root = os.open(layer, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return libc.openat2(root, rel, flags, _NO_LINKS)
    finally:
        os.close(root)


def follow_links(path: str, readlink: Callable[[str], str | None]) -> list[str] | None:
    """The components of `path` (absolute in an image) with the links among them followed as
    the image sees them (an absolute target from the image's root, `..` stopping at it);
    `readlink(relative)` is the target of that entry when it is a link, else None. None for a
    loop of links."""
    pending = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        target = readlink("/".join([*done, part]))  # `done` holds no links: no host path leaks
        if target is None:
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            return None
        if target.startswith("/"):
            done = []
        pending = [p for p in target.split("/") if p not in ("", ".")] + pending
    return done


def lexists(layers: Sequence[Path], path: str) -> bool:
    """Whether the stack has an entry at `path` (absolute, in the image) as it stands, a link
    counted as itself: no link followed, on the way or at the end."""
    return _entry(layers, path.lstrip("/")) is not None


def resolve(layers: Sequence[Path], path: str) -> tuple[Path, os.stat_result] | None:
    """The host path and stat of `path` (absolute, in the image) through the stack, links on
    the way resolved inside the image; None when it does not exist there."""
    found = _resolved(layers, path)
    return None if found is None else (found[0] / found[1], found[2])


def _resolved(layers: Sequence[Path], path: str) -> tuple[Path, str, os.stat_result] | None:
    """(layer, path relative to it, lstat) of `path` through the stack, as `resolve`."""

    def readlink(rel: str) -> str | None:
        found = _entry(layers, rel)
        if found is None or not stat.S_ISLNK(found[1].st_mode):
            return None
        parent, _, name = rel.rpartition("/")
        fd = _open_in(found[0], parent or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            return os.readlink(name, dir_fd=fd)
        finally:
            os.close(fd)

    parts = follow_links(path, readlink)
    if not parts:
        return None
    rel = "/".join(parts)
    found = _entry(layers, rel)
    return None if found is None else (found[0], rel, found[1])


def read_text(layers: Sequence[Path], path: str) -> str | None:
    """The image's file `path`, or None where it has none that is a regular file.

    Raises:
        TemplateError: the file holds more than MAX_TABLE_BYTES.
    """
    found = _resolved(layers, path)
    if found is None or not stat.S_ISREG(found[2].st_mode):
        return None
    try:
        data = read_capped(found[0], found[1], path, MAX_TABLE_BYTES)
    except (FileNotFoundError, NotRegularFile):
        return None
    return data.decode(errors="replace")


def ids_of(layers: Sequence[Path], user: str) -> tuple[int, int] | None:
    """(uid, gid) of `user` (a name, a number, `name:group`) in the image's /etc/passwd and
    /etc/group; None for a name it does not know."""
    name, _, group = user.partition(":")
    passwd = _table(read_text(layers, "/etc/passwd"))
    if name.isdigit():
        uid = int(name)
        gid = next((int(r[3]) for r in passwd.values() if r[2] == name), uid)
    elif name in passwd:
        uid, gid = int(passwd[name][2]), int(passwd[name][3])
    else:
        return None
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            groups = _table(read_text(layers, "/etc/group"))
            if group not in groups:
                return None
            gid = int(groups[group][2])
    return uid, gid


def _table(text: str | None) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and fields[0] not in rows:
            rows[fields[0]] = fields
    return rows
