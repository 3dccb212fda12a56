"""A sandbox's writable layer made into a template layer (`NspawnRuntime.export_diff`): its
overlay upper directory (files owned by the sandbox's host ids, uid_base + N) copied into a new
directory owned as template layers are (N, shown to each sandbox through an idmapped mount).
The sandbox must be frozen or stopped: nothing may write the upper directory meanwhile.

Kept as overlayfs reads them: whiteouts (0/0 character devices, which overlayfs makes as its
mounter, host root) and opaque directories (`trusted.overlay.opaque=y`); hard links within the
upper directory stay links; FIFOs stay. Of the extended attributes only `user.*` (not
`user.overlay.*`, overlayfs' own under `userxattr`) and `security.capability` are kept: a
capability a step set in its user namespace is stored with that namespace's root (version 3,
rootid uid_base) and becomes a version 2 one, as image layers have it, so each sandbox's root
gets it through its idmap. POSIX ACLs are not kept (their ids would need shifting). Other
overlayfs attributes (origin, impure) go; a redirect or metacopy (off in sandboxd's mounts)
cannot be copied without its lower layer and is refused. Sockets and device nodes are skipped."""

from __future__ import annotations

import logging
import os
import posixpath
import stat
from typing import TYPE_CHECKING

from sandboxd.errors import TemplateError
from sandboxd.host.uid_ranges import RANGE_SIZE
from sandboxd.layers.entries import DIR_FLAGS, OPAQUE_XATTR, DirTimes, Parts, copy_data, walk

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

log = logging.getLogger("sandboxd.runtime.nspawn.export")

_REFUSED_XATTRS = ("trusted.overlay.redirect", "trusted.overlay.metacopy")
_CAP_REVISION_MASK, _CAP_V2, _CAP_V3 = 0xFF000000, 0x02000000, 0x03000000
_CAP_V3_BYTES = 24  # magic, (permitted, inheritable) x 2, rootid: little-endian u32s


def layer_from_upper(upper: Path, uid_base: int, dest: Path, exclude: Iterable[str]) -> None:
    """Fill the empty directory `dest` (a new layer: sandboxd.layers.store.LayerStore.add)
    from the upper directory `upper` of a sandbox whose ids start at `uid_base`.

    `exclude` names paths (relative to the root) left out with all below them, whatever the
    sandbox did there, and the directories holding them where nothing else is left in them:
    sandboxd writes what the boot steps write (sandboxd.runtime.nspawn.steps
    `written_by_sandboxd`) into every sandbox's writable layer and writes them
    again in each sandbox of the template (resolv.conf when it has a network), so a step's own
    version of one would show only in a sandbox without a network: it is not kept either.

    Raises:
        TemplateError: an entry belongs to an id outside the sandbox's range, or carries an
            overlayfs redirect or metacopy.
    """
    skip = {posixpath.normpath(p.strip("/")) for p in exclude}
    src = os.open(upper, DIR_FLAGS)
    try:
        root = os.open(dest, DIR_FLAGS)
        try:
            snap = _Snapshot(uid_base, root, skip)
            snap.meta(src, root, (), os.fstat(src))
            snap.tree(src)
            snap.prune()
            snap.times.apply()
        finally:
            os.close(root)
    finally:
        os.close(src)


class _Snapshot:
    def __init__(self, uid_base: int, root: int, skip: set[str]) -> None:
        self.uid_base, self.root, self.skip = uid_base, root, skip
        self.times = DirTimes(root)
        self.links: dict[int, Parts] = {}  # inode -> the first path written for it

    def tree(self, upper: int) -> None:
        """Everything below the root, a directory at a time (no recursion: a step may nest
        directories deeper than Python's stack or the open-file limit)."""
        todo: list[Parts] = [()]
        while todo:
            parts = todo.pop()
            src, dst = walk(upper, parts), walk(self.root, parts)
            assert src is not None  # noqa: S101  # a directory seen and made before
            assert dst is not None  # noqa: S101
            try:
                for name in sorted(os.listdir(src)):
                    here = (*parts, name)
                    if "/".join(here) not in self.skip:
                        todo += self._entry(src, dst, name, here)
            finally:
                os.close(src)
                os.close(dst)

    def _entry(self, src: int, dst: int, name: str, here: Parts) -> list[Parts]:
        """Copy `name`; a directory is made (its contents come later) and returned."""
        st = os.stat(name, dir_fd=src, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(name, 0o700, dir_fd=dst)
            s, d = os.open(name, DIR_FLAGS, dir_fd=src), os.open(name, DIR_FLAGS, dir_fd=dst)
            try:
                self.meta(s, d, here, st)
            finally:
                os.close(s)
                os.close(d)
            return [here]
        if stat.S_ISREG(st.st_mode):
            self._file(src, dst, name, here, st)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
            os.chown(name, *self._ids(st, here), dir_fd=dst, follow_symlinks=False)
            os.utime(name, ns=_times(st), dir_fd=dst, follow_symlinks=False)
        elif stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0):  # a whiteout
            os.mknod(name, stat.S_IFCHR, os.makedev(0, 0), dir_fd=dst)
        elif stat.S_ISFIFO(st.st_mode):
            os.mkfifo(name, 0o600, dir_fd=dst)
            os.chown(name, *self._ids(st, here), dir_fd=dst)
            os.chmod(name, stat.S_IMODE(st.st_mode), dir_fd=dst)
            os.utime(name, ns=_times(st), dir_fd=dst)
        else:
            log.debug("snapshot skipped /%s: a socket or device node", "/".join(here))
        return []

    def _file(self, src: int, dst: int, name: str, here: Parts, st: os.stat_result) -> None:
        if st.st_nlink > 1 and st.st_ino in self.links:
            first = self.links[st.st_ino]
            source = walk(self.root, first[:-1])
            assert source is not None  # noqa: S101  # written before
            try:
                os.link(first[-1], name, src_dir_fd=source, dst_dir_fd=dst, follow_symlinks=False)
            finally:
                os.close(source)
            return
        s = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        try:
            d = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600, dir_fd=dst)  # fmt: skip
            try:
                copy_data(s, d)
                self.meta(s, d, here, st)
            finally:
                os.close(d)
        finally:
            os.close(s)
        self.links[st.st_ino] = here

    def meta(self, src: int, dst: int, here: Parts, st: os.stat_result) -> None:
        """Owner, then mode (a chown clears set-id bits and capabilities), extended
        attributes, then times (a directory's once it is written)."""
        os.fchown(dst, *self._ids(st, here))
        os.fchmod(dst, stat.S_IMODE(st.st_mode))
        is_dir = stat.S_ISDIR(st.st_mode)
        for attr in os.listxattr(src):
            if attr.startswith(_REFUSED_XATTRS):
                raise TemplateError(f"/{'/'.join(here)} has {attr}: it cannot make a layer")
            value = os.getxattr(src, attr)
            if attr == OPAQUE_XATTR:
                if is_dir and value == b"y":
                    os.setxattr(dst, attr, value)
            elif attr == "security.capability":
                if (kept := self._capability(value, here)) is not None:
                    os.setxattr(dst, attr, kept)
            elif attr.startswith("user.") and not attr.startswith("user.overlay."):
                os.setxattr(dst, attr, value)
        if is_dir:
            self.times.later(here, st)
        else:
            os.utime(dst, ns=_times(st))

    def _ids(self, st: os.stat_result, here: Parts) -> tuple[int, int]:
        uid, gid = st.st_uid - self.uid_base, st.st_gid - self.uid_base
        if not (0 <= uid < RANGE_SIZE and 0 <= gid < RANGE_SIZE):
            raise TemplateError(
                f"/{'/'.join(here)} belongs to host ids {st.st_uid}:{st.st_gid}, outside the "
                f"sandbox's range from {self.uid_base}"
            )
        return uid, gid

    def _capability(self, value: bytes, here: Parts) -> bytes | None:
        magic = int.from_bytes(value[:4], "little")
        if magic & _CAP_REVISION_MASK != _CAP_V3 or len(value) != _CAP_V3_BYTES:
            return value
        rootid = int.from_bytes(value[20:24], "little")
        if rootid != self.uid_base:  # for another namespace's root: no use in a template
            log.warning("snapshot dropped /%s's capabilities (root %d)", "/".join(here), rootid)
            return None
        return ((magic & ~_CAP_REVISION_MASK) | _CAP_V2).to_bytes(4, "little") + value[4:20]

    def prune(self) -> None:
        """Remove the directories that held only excluded paths (sandboxd made them for its
        files): empty and not opaque, from the deepest."""
        for path in self.skip:
            parts = tuple(path.split("/"))
            for depth in range(len(parts) - 1, 0, -1):
                if not self._remove_if_empty(parts[:depth]):
                    break

    def _remove_if_empty(self, parts: Parts) -> bool:
        fd = walk(self.root, parts)
        if fd is None:
            return True  # never written: its parent may still be empty
        try:
            if os.listdir(fd) or OPAQUE_XATTR in os.listxattr(fd):
                return False
        finally:
            os.close(fd)
        parent = walk(self.root, parts[:-1])
        assert parent is not None  # noqa: S101  # its child was just there
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)
        return True


def _times(st: os.stat_result) -> tuple[int, int]:
    return st.st_atime_ns, st.st_mtime_ns
