"""Build-context uploads (sandboxd.builds.uploads) as the SDKs send them: tars, gzipped or plain,
read from a stream of chunks with a Content-Length. What is refused leaves nothing behind and is
a domain error (a 4xx once mapped); what is kept is whole, owned by root, with its links."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from typing import TYPE_CHECKING

import anyio
import pytest

from sandboxd.api.errors import status_of
from sandboxd.builds.uploads import Uploads
from sandboxd.errors import BadUpload, LengthRequired, UploadTooLarge
from tests.images.oci_layout import Layer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = [pytest.mark.root, pytest.mark.anyio]

HASH = "0123456789abcdef" * 4


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def send(uploads: Uploads, data: bytes, files_hash: str = HASH) -> None:
    await uploads.receive(files_hash, chunks(data), len(data))


def context_tar() -> bytes:
    """What the Python SDK sends for `copy("app/", ...)`: the directory, then its entries."""
    return (
        Layer()
        .dir("app", mode=0o750, uid=1000, gid=1000)
        .file("app/main.py", b"print('hi')\n", mode=0o755, uid=1000, gid=1000)
        .dir("app/static")
        .file("app/static/index.html", b"<html>")
        .symlink("app/config", "/etc/app/config")
        .hardlink("app/alias.py", "app/main.py")
        .file("app/.wh.kept", b"a file of that name")
        .tar()
    )


def leftovers(uploads: Uploads) -> list[str]:
    return sorted(p.name for p in uploads.dir.iterdir()) if uploads.dir.exists() else []


@pytest.fixture
def uploads(tmp_path: Path) -> Uploads:
    return Uploads(tmp_path / "uploads")


@pytest.mark.parametrize("compress", [gzip.compress, bytes], ids=["gzip", "plain"])
async def test_an_upload_is_unpacked_with_links_and_root_as_owner(
    uploads: Uploads, compress: object
) -> None:
    assert not uploads.present(HASH)
    await send(uploads, compress(context_tar()))  # type: ignore[operator]

    assert uploads.present(HASH)
    app = uploads.path(HASH) / "app"
    assert (app / "main.py").read_bytes() == b"print('hi')\n"
    assert (app / "static/index.html").read_bytes() == b"<html>"
    assert (app / "config").readlink().as_posix() == "/etc/app/config"
    assert (app / "alias.py").stat().st_ino == (app / "main.py").stat().st_ino
    assert (app / ".wh.kept").read_bytes() == b"a file of that name"  # no whiteouts here
    main = (app / "main.py").stat()
    assert (main.st_uid, main.st_gid, main.st_mode & 0o7777) == (0, 0, 0o755)
    assert (app.stat().st_uid, app.stat().st_mode & 0o777) == (0, 0o750)
    assert leftovers(uploads) == [HASH]


async def test_device_nodes_are_skipped(uploads: Uploads) -> None:
    await send(uploads, Layer().chardev("null", 1, 3).file("kept", b"k").tar())

    assert os.listdir(uploads.path(HASH)) == ["kept"]


ESCAPES = {
    "dot-dot": Layer().dir("a").file("a/../../escaped", b"x"),
    "absolute": Layer().file("/escaped", b"x"),
    "symlink then a file through it": Layer().symlink("out", "..").file("out/escaped", b"x"),
    "symlink to an absolute dir": Layer().symlink("etc", "/etc").file("etc/escaped", b"x"),
    "hard link out": Layer().hardlink("passwd", "../../etc/passwd"),
    "hard link absolute": Layer().hardlink("passwd", "/etc/passwd"),
    "hard link through a symlink": Layer().symlink("h", "/etc").hardlink("p", "h/passwd"),
}


@pytest.mark.parametrize("case", ESCAPES, ids=str)
async def test_entries_leaving_the_context_are_refused(
    case: str, uploads: Uploads, tmp_path: Path
) -> None:
    with pytest.raises(BadUpload, match=r"refused|not in the archive") as e:
        await send(uploads, gzip.compress(ESCAPES[case].tar()))

    assert status_of(e.value) == 400
    assert leftovers(uploads) == []
    assert not (tmp_path / "escaped").exists()
    assert not os.path.exists("/etc/escaped")


async def test_a_huge_content_length_is_refused_before_reading(uploads: Uploads) -> None:
    read = []

    async def body() -> AsyncIterator[bytes]:
        read.append(True)
        yield b"x"

    with pytest.raises(UploadTooLarge, match="over the limit") as e:
        await uploads.receive(HASH, body(), 1 << 40)
    assert status_of(e.value) == 413
    with pytest.raises(LengthRequired) as missing:
        await uploads.receive(HASH, body(), None)
    assert status_of(missing.value) == 411
    assert read == []
    assert leftovers(uploads) == []


@pytest.mark.parametrize("max_bytes", [5000, 1 << 30], ids=["at the cap", "under the cap"])
async def test_a_stream_longer_than_its_length_is_cut_off(tmp_path: Path, max_bytes: int) -> None:
    uploads = Uploads(tmp_path / "uploads", max_bytes=max_bytes)
    sent = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            sent.append(1000)
            yield b"\0" * 1000

    with pytest.raises(BadUpload, match="past its Content-Length"):
        await uploads.receive(HASH, endless(), 5000)
    assert sum(sent) == 6000  # stopped at the first chunk past it
    assert leftovers(uploads) == []


async def test_a_tar_unpacking_past_the_limit_is_refused(tmp_path: Path) -> None:
    small = Uploads(tmp_path / "uploads", max_unpacked_bytes=1 << 20)
    bomb = gzip.compress(Layer().file("zeros", b"\0" * (4 << 20)).tar())
    assert len(bomb) < 1 << 20

    with pytest.raises(UploadTooLarge, match="unpacks to more than"):
        await send(small, bomb)
    assert leftovers(small) == []


async def test_a_short_body_is_refused(uploads: Uploads) -> None:
    data = gzip.compress(context_tar())
    with pytest.raises(BadUpload, match=r"ended after 100 of its \d+ bytes"):
        await uploads.receive(HASH, chunks(data[:100]), len(data))
    assert leftovers(uploads) == []


@pytest.mark.parametrize(
    "data",
    [
        gzip.compress(context_tar())[:-20],  # truncated: its trailer and some data gone
        gzip.compress(context_tar())[:200] + b"\xff" * 50 + gzip.compress(context_tar())[250:],
        b"this is not a tar at all, nor a gzip" * 20,
        b"",
    ],
    ids=["truncated gzip", "corrupt gzip", "not a tar", "empty"],
)
async def test_a_broken_archive_is_refused(uploads: Uploads, data: bytes) -> None:
    with pytest.raises(BadUpload, match=r"not a whole tar|cannot be unpacked") as e:
        await send(uploads, data)
    assert status_of(e.value) == 400
    assert leftovers(uploads) == []


@pytest.mark.parametrize("files_hash", ["ABCDEF" + "0" * 58, "0" * 63, "../" + "0" * 61, ""])
async def test_a_malformed_hash_is_refused(uploads: Uploads, files_hash: str) -> None:
    with pytest.raises(BadUpload, match="64 lower-case hex digits"):
        uploads.present(files_hash)
    with pytest.raises(BadUpload, match="64 lower-case hex digits"):
        await send(uploads, context_tar(), files_hash)
    assert leftovers(uploads) == []


async def test_concurrent_uploads_of_one_hash_leave_one_whole_tree(uploads: Uploads) -> None:
    big = Layer()
    for i in range(40):
        big.file(f"dir/f{i}", bytes([i]) * (64 << 10))
    data = gzip.compress(big.tar())

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(send, uploads, data)

    assert leftovers(uploads) == [HASH]
    files = sorted(os.listdir(uploads.path(HASH) / "dir"))
    assert files == sorted(f"f{i}" for i in range(40))
    assert (uploads.path(HASH) / "dir/f39").read_bytes() == bytes([39]) * (64 << 10)


async def test_a_client_gone_mid_body_leaves_nothing(uploads: Uploads) -> None:
    data = gzip.compress(context_tar())

    async def dropped() -> AsyncIterator[bytes]:
        yield data[:50]
        raise OSError("client disconnected")

    with pytest.raises(OSError, match="client disconnected"):
        await uploads.receive(HASH, dropped(), len(data))
    assert leftovers(uploads) == []


def test_the_sdks_archives_are_read(tmp_path: Path) -> None:
    """The Python SDK's own way of writing the archive (tarfile.add, default format)."""
    src = tmp_path / "ctx"
    (src / "app").mkdir(parents=True)
    (src / "app/x.txt").write_text("x")
    (src / "app/link").symlink_to("x.txt")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name in ("app", "app/link", "app/x.txt"):
            tar.add(src / name, arcname=name, recursive=False)
    uploads = Uploads(tmp_path / "uploads")

    anyio.run(send, uploads, out.getvalue())

    assert (uploads.path(HASH) / "app/x.txt").read_text() == "x"
    assert (uploads.path(HASH) / "app/link").readlink().as_posix() == "x.txt"


def test_what_a_crash_left_is_removed(uploads: Uploads) -> None:
    half = uploads.dir / ".new-abc"
    (half / "tree/app").mkdir(parents=True)
    anyio.run(send, uploads, Layer().file("x", b"x").tar())

    uploads.remove_leftovers()

    assert leftovers(uploads) == [HASH]
