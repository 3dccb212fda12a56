"""Build-context uploads: the tar a template build's COPY step takes its files from, as the SDKs
PUT it (gzip or plain, unannounced: told apart by the gzip magic; entries relative to the build
context's root). Each is unpacked once into `DIR/HASH` (HASH: the step's files hash) and kept
for every build naming it. An upload is spooled and unpacked in `DIR/.new-…` and renamed into
place, so `DIR/HASH` is whole whenever it exists and a failed upload leaves nothing; of two
uploads of one hash the first renamed stays (the hash names the same files: the SDKs hash the
step's source, destination and the files' paths, modes and contents).

The tree is written safely (sandboxd.images.tar_tree: nothing outside it, symlinks kept and
never followed, device nodes skipped), owned by root whatever the tar says: the COPY step gives
the files their owner (sandboxd.builds.copy_layer)."""

from __future__ import annotations

import errno
import logging
import os
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread

from sandboxd.builds.recipe import FILES_HASH
from sandboxd.errors import BadUpload, LengthRequired, UploadTooLarge
from sandboxd.host.removal import remove_tree
from sandboxd.images.tar_tree import Rules, decompressed, extract
from sandboxd.layers.entries import DIR_FLAGS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.images.tar_tree import Reader
    from sandboxd.layers.quota import StorageQuota

log = logging.getLogger("sandboxd.builds.uploads")

# What a client may send, compressed or not. The SDKs send one archive per COPY step, read whole
# into a temporary file first; E2B sets no limit of its own (the storage's). 2 GiB holds any
# source tree and most vendored dependencies, and bounds what one request can make sandboxd
# write to its disk.
MAX_UPLOAD_BYTES = 2 << 30
# The tar after gunzip: a small gzip of zeros must not fill the disk.
MAX_UNPACKED_BYTES = 8 << 30
# The SDKs' files hash: sha256 hex digest, lower case (Python `hexdigest()`, JS `digest('hex')`).
_UPLOAD = Rules("upload", BadUpload, owners=False, whiteouts=False)
_NEW = ".new-"
_WRITE_BYTES = 1 << 20  # spool writes batched: one thread hop per MiB, not per chunk
# Failures of the host, not of the archive: the client cannot fix them by sending it again.
_HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EROFS})


def declared_length(header: str | None) -> int | None:
    """An upload's Content-Length header as a number (None: absent or not one)."""
    return int(header) if header and header.isdigit() else None


class _Limited:
    """A reader that refuses to pass on more than `limit` bytes, with `refusal`."""

    def __init__(self, stream: Reader, limit: int, refusal: UploadTooLarge) -> None:
        self.stream, self.limit, self.count, self.refusal = stream, limit, 0, refusal

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        if self.count > self.limit:
            raise self.refusal
        return data


class Uploads:
    """The unpacked uploads under `dir` (made 0700: only sandboxd reads them), within the
    build storage quota `storage` (none: only the caps per upload)."""

    def __init__(
        self,
        dir: Path,
        storage: StorageQuota | None = None,
        max_bytes: int = MAX_UPLOAD_BYTES,
        max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    ) -> None:
        self.dir = dir
        self.storage = storage
        self.max_bytes = max_bytes
        self.max_unpacked_bytes = max_unpacked_bytes

    def path(self, files_hash: str) -> Path:
        """The unpacked build context of `files_hash` (whether or not it is there).

        Raises:
            BadUpload: `files_hash` is not 64 lower-case hex digits.
        """
        if not FILES_HASH.match(files_hash):
            raise BadUpload(f"files hash '{files_hash}' is not 64 lower-case hex digits")
        return self.dir / files_hash

    def present(self, files_hash: str) -> bool:
        """Raises BadUpload for a malformed hash, as `path`."""
        return self.path(files_hash).is_dir()

    def remove_leftovers(self) -> None:
        """Remove what uploads stopped by a crash left. Only when none runs: at start-up.

        Raises:
            TeardownError: one would not go.
        """
        if self.dir.is_dir():
            for path in self.dir.iterdir():
                if path.name.startswith(_NEW):
                    remove_tree(path)

    async def remove(self) -> None:
        """Remove every upload (their template is deleted).

        Raises:
            TeardownError: one would not go.
        """
        await to_thread.run_sync(remove_tree, self.dir)

    async def receive(
        self, files_hash: str, body: AsyncIterator[bytes], content_length: int | None
    ) -> None:
        """Read the tar `body` (gzip or plain) and unpack it as `files_hash`'s build context.

        Raises:
            BadUpload: a malformed hash, a body that ends before `content_length` or goes on
                past it, not a tar, or an entry that would leave the context.
            LengthRequired: no `content_length` (nothing of the body is read).
            UploadTooLarge: `content_length` over `max_bytes` (nothing is read), or the tar
                unpacks to more than `max_unpacked_bytes`.
            StorageFull: `content_length` over what the quota has left (nothing is read), or
                the tar unpacks to more (as soon as it does).
            OSError: the host failed (a full disk).
        """
        final = self.path(files_hash)
        if content_length is None:
            raise LengthRequired("an upload needs a Content-Length")
        if content_length > self.max_bytes:
            raise UploadTooLarge(
                f"the upload's {content_length} bytes are over the limit of {self.max_bytes}"
            )
        cap = self.max_unpacked_bytes
        refusal = UploadTooLarge(f"the upload unpacks to more than {cap} bytes")
        if self.storage is not None:
            # Others' uploads running meanwhile are counted on disk as far as they got.
            room = await to_thread.run_sync(self.storage.room)
            if content_length >= room:
                raise self.storage.full(f"the upload's {content_length} bytes")
            if room - content_length < cap:  # the spooled archive stays while unpacking
                cap, refusal = room - content_length, self.storage.full("the unpacked upload")
        work = await to_thread.run_sync(self._new_dir)
        try:
            archive = work / "archive"
            await self._spool(body, archive, content_length)
            await to_thread.run_sync(self._unpack, archive, work / "tree", final, cap, refusal)
        finally:
            with anyio.CancelScope(shield=True):  # a client gone mid-body: still clean up
                await to_thread.run_sync(remove_tree, work)

    def _new_dir(self) -> Path:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=_NEW, dir=self.dir))

    async def _spool(self, body: AsyncIterator[bytes], archive: Path, expected: int) -> None:
        """Write `body` to `archive`, refusing it as soon as it goes past `expected` bytes."""
        count, pending = 0, bytearray()
        with open(archive, "wb") as out:  # noqa: ASYNC230  # the writes go to a thread below
            async for chunk in body:
                count += len(chunk)
                if count > expected:
                    raise BadUpload(f"the upload goes on past its Content-Length ({expected})")
                pending += chunk
                if len(pending) >= _WRITE_BYTES:
                    await to_thread.run_sync(out.write, pending)
                    pending = bytearray()
            await to_thread.run_sync(out.write, pending)
        if count < expected:
            raise BadUpload(f"the upload ended after {count} of its {expected} bytes")

    def _unpack(
        self, archive: Path, tree: Path, final: Path, cap: int, refusal: UploadTooLarge
    ) -> None:
        tree.mkdir()
        tree.chmod(0o755)  # the build context's root, as COPY may take it; serve's umask is 077
        root = os.open(tree, DIR_FLAGS)
        try:
            with decompressed(archive, BadUpload) as stream:
                limited = _Limited(stream, cap, refusal)
                extract(limited, root, _UPLOAD)
                while limited.read(1 << 16):  # gzip's trailer is checked only at its end
                    pass
        except (tarfile.TarError, EOFError, zlib.error) as e:
            raise BadUpload(f"the upload is not a whole tar (plain or gzip): {e}") from e
        except OSError as e:
            if e.errno in _HOST_ERRNOS:
                raise
            raise BadUpload(f"the upload cannot be unpacked: {e}") from e
        finally:
            os.close(root)
        try:
            os.rename(tree, final)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            log.info("upload %s was stored meanwhile by another request: kept that", final.name)
        else:
            log.info("upload %s unpacked", final.name)
