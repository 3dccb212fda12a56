"""Unpacking one image layer (a tar: plain, gzip or zstd) into an empty directory as an overlayfs
lower layer: `.wh.NAME` becomes a whiteout (a 0/0 character device NAME) and `.wh..wh..opq`
makes its directory opaque (`trusted.overlay.opaque=y`), as containerd's overlay snapshotter
does. Nothing may land outside the directory (sandboxd.images.tar_tree). Ownership and modes are
kept as in the tar: sandboxes see them through an idmapped mount (sandboxd.runtime.nspawn.steps.Layers),
like base's."""

from __future__ import annotations

import hashlib
import os
import tarfile
from typing import TYPE_CHECKING, Protocol

from sandboxd.errors import ImageError
from sandboxd.images.tar_tree import CHUNK, Rules, decompressed, extract
from sandboxd.layers.entries import DIR_FLAGS, OPAQUE_XATTR

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.images.tar_tree import Reader

__all__ = ["OPAQUE_XATTR", "Quota", "unpack"]

_LAYER = Rules("layer", ImageError, owners=True, whiteouts=True)


class Quota(Protocol):
    """What unpacked layers may still take of the disk, and the error once they would take
    more (sandboxd.layers.quota.StorageQuota)."""

    def room(self) -> int: ...

    def full(self, what: str) -> Exception: ...


class _Hashing:
    """A reader that hashes what passes through it (the uncompressed tar, for its diff_id),
    and refuses to pass on more than `quota` has room for."""

    def __init__(self, stream: Reader, name: str, quota: Quota | None) -> None:
        self.stream = stream
        self.sha = hashlib.sha256()
        self.name, self.quota, self.count = name, quota, 0
        self.room = None if quota is None else quota.room()

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.sha.update(data)
        self.count += len(data)
        if self.quota is not None and self.room is not None and self.count > self.room:
            raise self.quota.full(f"layer {self.name}")
        return data


def unpack(blob: Path, dest: Path, diff_id: str, quota: Quota | None = None) -> None:
    """Unpack the layer `blob` into the empty directory `dest` (made 0755, owned 0:0 unless the
    tar says otherwise for `./`), within `quota` when given.

    Raises:
        ImageError: an entry would leave `dest`, the blob is not a tar (plain, gzip or zstd),
            or the uncompressed tar's sha256 is not `diff_id`.
        HostError: the layer is zstd-compressed and zstd is not installed.
        Exception: `quota.full(...)`, as soon as the layer would pass it.
    """
    os.chown(dest, 0, 0)
    dest.chmod(0o755)
    root = os.open(dest, DIR_FLAGS)
    try:
        with decompressed(blob, ImageError) as stream:
            hashing = _Hashing(stream, blob.name, quota)
            extract(hashing, root, _LAYER)
            while hashing.read(CHUNK):  # the tar's padding after its end marker
                pass
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ImageError(f"layer {blob.name}: {e}") from e
    finally:
        os.close(root)
    found = f"sha256:{hashing.sha.hexdigest()}"
    if found != diff_id:
        raise ImageError(
            f"layer {blob.name}: its tar has digest {found}, the config says {diff_id}"
        )
