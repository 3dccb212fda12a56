"""A template build's COPY step (`[src, dest, user, mode]`) as a layer of its own, written from
the step's uploaded build context (sandboxd.builds.uploads) the way E2B's orchestrator does it
in the build VM (e2b-dev/infra packages/orchestrator/pkg/template/build/commands: copy.go
parseCopyArgs, copy_script.sh), but into a new overlay layer instead of the running root.

Where the layer adds a directory the image below already has, the layer's copy of it gets the
image's owner, mode, extended attributes and times: an overlay upper directory's own metadata is
what the merged view shows, so a COPY into /home/user/app must not make /home or /home/user
root's 0755. That needs `lower_view`, the layers below mounted read-only, as they store their
ids (0..65535, no idmap); without it the image is taken to be empty (parents made as mkdir -p
makes them, symlinks of the image not followed)."""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import stat
from typing import TYPE_CHECKING

from sandboxd.errors import CopyFailed
from sandboxd.images.tar_tree import Rules, open_dir
from sandboxd.layers.entries import DIR_FLAGS, DirTimes, Parts, copy_data, lstat_in, walk

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger("sandboxd.builds.copy_layer")

_SOURCE = Rules("COPY source", CopyFailed, owners=False, whiteouts=False)
_GLOB_META = "*?[{"  # doublestar's meta characters
_MAX_LINKS = 40  # as the kernel's path walk (ELOOP)
_NEW_DIR_MODE = 0o755  # mkdir -p under the build's umask 022


def parse_mode(text: str) -> int | None:
    """A COPY step's mode argument: `""` keeps the files' modes; otherwise octal (the SDKs send
    four digits, "0755"), given to every file and new directory copied, as E2B's `chmod -R`
    does (so "0000" is 0000: E2B only skips an empty one).

    Raises:
        CopyFailed: not an octal mode.
    """
    if text == "":
        return None
    if not re.fullmatch(r"[0-7]{1,4}", text):
        raise CopyFailed(f"COPY mode '{text}' is not an octal mode such as 0755")
    return int(text, 8)


def source_base(src: str) -> Parts:
    """Where in the build context a COPY takes its files from. The SDKs apply `src`'s glob
    themselves and upload only what matches, so, as E2B's parseCopyArgs does with
    doublestar.SplitPattern(src + "/"), the source is `src` up to the last `/` before its first
    glob character (`app/*.py` -> `app`, `*.txt` -> the context's root, `app/` -> `app`).

    Raises:
        CopyFailed: the source would be outside the context (`..`).
    """
    pattern, split, i = (src if src.endswith("/") else src + "/"), -1, 0
    while i < len(pattern) and pattern[i] not in _GLOB_META:
        if pattern[i] == "\\":  # an escaped character
            i += 1
        elif pattern[i] == "/":
            split = i
        i += 1
    # filepath.Join(unpackDir, base): a leading `/` is inside the context too.
    relative = posixpath.normpath(pattern[:split].lstrip("/") or ".") if split > 0 else "."
    if relative == ".." or relative.startswith("../"):
        raise CopyFailed(f"COPY source '{src}' leaves the build context")
    return tuple(p for p in relative.split("/") if p not in ("", "."))


def copy_to_layer(
    context: Path,
    src: str,
    dest: str,
    layer: Path,
    *,
    uid: int,
    gid: int,
    mode: int | None,
    workdir: str = "/",
    lower_view: Path | None = None,
) -> None:
    """Fill the empty directory `layer` (a new layer: sandboxd.layers.store.LayerStore.add)
    with what `COPY src dest` adds to the image below, owned `uid`:`gid` (resolved by the
    caller from the step's user, `user` meaning `user:user`, or the template's current user as
    E2B's parseCopyArgs; E2B's `chown -R`) with `mode` (None: the context's modes; see
    parse_mode).

    As E2B's copy_script.sh: a relative `dest` is below `workdir` (E2B: the template's workdir,
    else the user's home); a file or symlink source goes to `dest`, or into it when `dest` ends
    with `/` or is a directory (mv), parents made as `mkdir -p`; a directory source's contents
    merge into `dest` (made as `mkdir -p`; tar --no-overwrite-dir: directories already there
    keep their metadata, files are replaced; --keep-directory-symlink: symlinks to directories
    in the image are followed). Links in the context are copied as links, never followed.

    Raises:
        CopyFailed: the source is not in `context`, or the destination needs a directory where
            the image has a file, or a file where it has a directory.
    """
    base = source_base(src)
    target = posixpath.normpath(posixpath.join(workdir, dest))
    target_parts = tuple(p for p in target.split("/") if p)
    into = dest.endswith("/") or not target_parts
    with contextlib.ExitStack() as fds:
        ctx = _opened(fds, context)
        lower = _opened(fds, lower_view) if lower_view is not None else None
        copy = _Copy(_opened(fds, layer), lower, uid, gid, mode)
        copy.root_meta()
        copy.source(ctx, base, src, target_parts, into)
        copy.times.apply()


def _opened(fds: contextlib.ExitStack, path: Path) -> int:
    fd = os.open(path, DIR_FLAGS)
    fds.callback(os.close, fd)
    return fd


class _Copy:
    """One COPY into the layer under the fd `root`, over the view under the fd `lower`."""

    def __init__(self, root: int, lower: int | None, uid: int, gid: int, mode: int | None) -> None:  # fmt: skip
        self.root, self.lower = root, lower
        self.uid, self.gid, self.mode = uid, gid, mode
        self.times = DirTimes(root)
        self.links: dict[tuple[int, int], Parts] = {}

    def root_meta(self) -> None:
        """The layer's root is the merged view's `/`: the image's, or root's 0755."""
        if self.lower is None:
            os.fchmod(self.root, _NEW_DIR_MODE)
            return
        self._meta_from_lower(self.root, self.lower, ())

    def source(self, ctx: int, base: Parts, src: str, target: Parts, into: bool) -> None:
        try:
            parent = open_dir(ctx, base[:-1], create=False, rules=_SOURCE)
        except FileNotFoundError as e:
            raise CopyFailed(f"source path does not exist: {src}") from e
        try:
            if not base:  # the context's root: a directory
                self.merge(parent, self.made(target))
                return
            try:
                st = os.stat(base[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError as e:
                raise CopyFailed(f"source path does not exist: {src}") from e
            if stat.S_ISDIR(st.st_mode):
                child = os.open(base[-1], DIR_FLAGS, dir_fd=parent)
                try:
                    self.merge(child, self.made(target))
                finally:
                    os.close(child)
                return
            if into:
                dst, name = self.made(target), base[-1]
            elif (real := self.resolve(target, make=False)) is not None:  # mv into a directory
                dst, name = self.made(real), base[-1]
            else:
                dst, name = self.made(target[:-1]), target[-1]
            self.put(dst, name, parent, base[-1], st)
        finally:
            os.close(parent)

    def merge(self, src: int, dst: Parts) -> None:
        """The contents of the directory fd `src` into the layer's directory `dst`, a
        directory at a time (no recursion: an upload may nest deeper than Python's stack)."""
        todo: list[tuple[Parts, Parts]] = [((), dst)]
        while todo:
            rel, into = todo.pop()
            fd = walk(src, rel)
            assert fd is not None  # noqa: S101  # a directory just seen
            try:
                for name in sorted(os.listdir(fd)):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(((*rel, name), self._merge_dir((*into, name), st)))
                    else:
                        self.put(into, name, fd, name, st)
            finally:
                os.close(fd)

    def _merge_dir(self, here: Parts, st: os.stat_result) -> Parts:
        """Where a source directory goes: the view's directory there (a symlink to one
        followed), or a new one in place of whatever else is there."""
        if self._lookup(here) is not None:
            real = self.resolve(here, make=False)
            if real is not None:  # a directory, or a symlink to one
                return self.made(real)
            self._unlink_in_layer(here)  # anything else is replaced
        self._mkdir(here, self.uid, self.gid, self._mode(st), st)
        return here

    def made(self, parts: Parts) -> Parts:
        """`resolve(parts, make=True)`: never None."""
        done = self.resolve(parts, make=True)
        assert done is not None  # noqa: S101  # made, or CopyFailed
        return done

    def resolve(self, parts: Parts, *, make: bool) -> Parts | None:
        """The directory `parts` of the merged view with its symlinks followed as the container
        would (within its root), or None if it is not one there. With `make`, it and its
        parents are made in the layer: the view's with its metadata, missing ones as mkdir -p
        makes them.

        Raises:
            CopyFailed: with `make`, a component is not a directory.
        """
        done: Parts = ()
        todo, hops = list(parts), 0
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                done = done[:-1]
                continue
            here = (*done, name)
            found = self._lookup(here)
            if found is not None and stat.S_ISLNK(found[0].st_mode):
                hops += 1
                if hops > _MAX_LINKS:
                    raise CopyFailed(f"too many levels of symbolic links in {_show(parts)}")
                link = self._readlink(here, found[1])
                done = () if link.startswith("/") else done
                todo[:0] = link.split("/")
                continue
            if found is None or not stat.S_ISDIR(found[0].st_mode):
                if not make:
                    return None
                if found is not None:
                    raise CopyFailed(f"{_show(here)} is not a directory in the image")
                self._mkdir(here, 0, 0, _NEW_DIR_MODE, None)
            elif make and found[1] != self.root:
                self._copy_lower_dir(here)
            done = here
        return done

    def put(self, dst: Parts, name: str, src_dir: int, src_name: str, st: os.stat_result) -> None:
        """A non-directory of the context as `dst/name`, replacing what the view has there."""
        here = (*dst, name)
        existing = self._lookup(here)
        if existing is not None and stat.S_ISDIR(existing[0].st_mode):
            raise CopyFailed(f"{_show(here)} is a directory in the image: COPY cannot replace it")
        self._unlink_in_layer(here)
        parent = walk(self.root, dst)
        assert parent is not None  # noqa: S101  # resolve made it
        try:
            self._make(parent, name, src_dir, src_name, st, here)
        finally:
            os.close(parent)

    def _make(self, parent: int, name: str, src_dir: int, src_name: str, st: os.stat_result, here: Parts) -> None:  # fmt: skip
        if stat.S_ISLNK(st.st_mode):  # chown -h, no chmod (E2B: "not meaningful" for links)
            os.symlink(os.readlink(src_name, dir_fd=src_dir), name, dir_fd=parent)
            os.chown(name, self.uid, self.gid, dir_fd=parent, follow_symlinks=False)
        elif stat.S_ISREG(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.links:  # hard links stay links, as tar copies them
                first = self.links[key]
                source = walk(self.root, first[:-1])
                assert source is not None  # noqa: S101  # made by this copy
                try:
                    os.link(first[-1], name, src_dir_fd=source, dst_dir_fd=parent,
                            follow_symlinks=False)  # fmt: skip
                finally:
                    os.close(source)
                return
            self._copy_file(parent, name, src_dir, src_name, st)
            self.links[key] = here
            return
        elif stat.S_ISFIFO(st.st_mode):
            os.mkfifo(name, stat.S_IMODE(st.st_mode), dir_fd=parent)
            os.chown(name, self.uid, self.gid, dir_fd=parent)
            if self.mode is not None:
                os.chmod(name, self.mode, dir_fd=parent)
        else:
            log.debug("COPY skipped %s: not a file, link, directory or FIFO", _show(here))
            return
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=parent, follow_symlinks=False)

    def _copy_file(self, parent: int, name: str, src_dir: int, src_name: str, st: os.stat_result) -> None:  # fmt: skip
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        src = os.open(src_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
        try:
            dst = os.open(name, flags, 0o600, dir_fd=parent)
            try:
                copy_data(src, dst)
                # E2B's order: the file as it was, chown (the kernel drops set-id bits), chmod.
                os.fchmod(dst, stat.S_IMODE(st.st_mode))
                os.fchown(dst, self.uid, self.gid)
                if self.mode is not None:
                    os.fchmod(dst, self.mode)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(dst)
        finally:
            os.close(src)

    def _mode(self, st: os.stat_result) -> int:
        return self.mode if self.mode is not None else stat.S_IMODE(st.st_mode)

    def _lookup(self, here: Parts) -> tuple[os.stat_result, int] | None:
        """`here`'s lstat in the merged view and the fd of the tree it is in (layer first)."""
        for tree in (self.root, self.lower):
            if tree is not None and (st := lstat_in(tree, here)) is not None:
                return st, tree
        return None

    def _readlink(self, here: Parts, tree: int) -> str:
        parent = walk(tree, here[:-1])
        assert parent is not None  # noqa: S101  # just found there
        try:
            return os.readlink(here[-1], dir_fd=parent)
        finally:
            os.close(parent)

    def _unlink_in_layer(self, here: Parts) -> None:
        parent = walk(self.root, here[:-1])
        if parent is None:
            return
        try:
            os.unlink(here[-1], dir_fd=parent)
        except FileNotFoundError:
            pass
        finally:
            os.close(parent)

    def _mkdir(self, here: Parts, uid: int, gid: int, mode: int, times: os.stat_result | None) -> None:  # fmt: skip
        parent = walk(self.root, here[:-1])
        assert parent is not None  # noqa: S101  # made before its children
        try:
            os.mkdir(here[-1], 0o700, dir_fd=parent)
            fd = os.open(here[-1], DIR_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        if times is not None:
            self.times.later(here, times)

    def _copy_lower_dir(self, here: Parts) -> None:
        """The view's directory `here` in the layer, with its metadata (once)."""
        if lstat_in(self.root, here) is not None:
            return
        assert self.lower is not None  # noqa: S101  # found in the view
        self._mkdir(here, 0, 0, 0o700, None)
        layer_dir, lower_dir = walk(self.root, here), walk(self.lower, here)
        assert layer_dir is not None  # noqa: S101  # just made
        assert lower_dir is not None  # noqa: S101  # just seen
        try:
            self._meta_from_lower(layer_dir, lower_dir, here)
        finally:
            os.close(layer_dir)
            os.close(lower_dir)

    def _meta_from_lower(self, fd: int, lower: int, here: Parts) -> None:
        st = os.fstat(lower)
        os.fchown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, stat.S_IMODE(st.st_mode))
        for attr in os.listxattr(lower):
            if not attr.startswith("trusted.overlay."):  # overlayfs' own: never copied
                os.setxattr(fd, attr, os.getxattr(lower, attr))
        self.times.later(here, st)


def _show(parts: Parts) -> str:
    return "/" + "/".join(parts)
