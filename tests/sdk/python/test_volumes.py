"""Volumes through the SDK's `Volume` and `AsyncVolume` (normal mode only): create, list,
connect, destroy, and every content method against sandboxd's volume-content API, which the
SDK finds through E2B_VOLUME_API_URL (scripts/test-sandboxd-sdk sets it to sandboxd's port).
Each test makes its own volumes and destroys them."""

from __future__ import annotations

import io
import os
import uuid
from typing import TYPE_CHECKING

import pytest
from e2b import (
    AsyncVolume,
    AuthenticationException,
    Volume,
    VolumeException,
    VolumeFileType,
    VolumeNotFoundException,
    VolumePathNotFoundException,
)

from tests.sdk.python.mode import normal_only

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = normal_only


@pytest.fixture
def volume() -> Iterator[Volume]:
    assert os.environ.get("E2B_VOLUME_API_URL"), "the SDK finds the content API only through it"
    made = Volume.create(f"sdk-{uuid.uuid4().hex[:12]}")
    yield made
    Volume.destroy(made.volume_id)


def test_create_list_connect_destroy() -> None:
    name = f"sdk-{uuid.uuid4().hex[:12]}"
    volume = Volume.create(name)
    assert volume.name == name
    assert volume.token is not None
    assert (volume.volume_id, name) in [(v.volume_id, v.name) for v in Volume.list()]
    info = Volume.get_info(volume.volume_id)
    assert (info.volume_id, info.name) == (volume.volume_id, name)
    assert info.token
    connected = Volume.connect(volume.volume_id)
    assert connected.name == name
    connected.write_file("/from-connect.txt", "connected")
    assert volume.read_file("/from-connect.txt") == "connected"

    with pytest.raises(VolumeException, match=f"Volume with name '{name}' already exists"):
        Volume.create(name)
    with pytest.raises(VolumeException, match="Invalid volume name"):
        Volume.create("not a name")
    assert Volume.destroy(volume.volume_id) is True
    assert Volume.destroy(volume.volume_id) is False
    with pytest.raises(VolumeNotFoundException, match=f"Volume {volume.volume_id} not found"):
        Volume.get_info(volume.volume_id)
    assert volume.volume_id not in [v.volume_id for v in Volume.list()]
    with pytest.raises(VolumePathNotFoundException):  # its token opens nothing any more
        volume.get_info("/")


def test_files(volume: Volume) -> None:
    written = volume.write_file("/notes/a.txt", "hello", force=True)
    assert (written.name, written.path, written.type) == (
        "a.txt",
        "/notes/a.txt",
        VolumeFileType.FILE,
    )
    assert (written.size, written.mode, written.uid, written.gid) == (5, 0o644, 1000, 1000)
    assert volume.read_file("/notes/a.txt") == "hello"
    assert volume.read_file("/notes/a.txt", format="bytes") == b"hello"
    with pytest.raises(VolumeException):  # exists, and no force: 409
        volume.write_file("/notes/a.txt", "again")
    volume.write_file("/notes/a.txt", b"bytes now", force=True)
    assert volume.read_file("/notes/a.txt", format="bytes") == b"bytes now"
    with pytest.raises(VolumePathNotFoundException):
        volume.write_file("/missing/parent.txt", "x")
    with pytest.raises(VolumePathNotFoundException):
        volume.read_file("/nope.txt")

    big = os.urandom(5 << 20)
    volume.write_file("/big.bin", io.BytesIO(big), uid=0, gid=0, mode=0o600)
    assert b"".join(volume.read_file("/big.bin", format="stream")) == big
    info = volume.get_info("/big.bin")
    assert (info.size, info.mode, info.uid, info.gid) == (len(big), 0o600, 0, 0)
    assert volume.exists("/big.bin") is True
    assert volume.exists("/nope") is False


def test_dirs_metadata_remove(volume: Volume) -> None:
    made = volume.make_dir("/d1", mode=0o755, uid=1000, gid=1000)
    assert made.type == VolumeFileType.DIRECTORY
    assert made.mode & 0o777 == 0o755
    with pytest.raises(VolumeException):  # exists, and no force: 409
        volume.make_dir("/d1")
    assert volume.make_dir("/d1", force=True).path == "/d1"
    volume.make_dir("/d1/d2/d3", force=True)
    volume.write_file("/d1/file1.txt", "1")
    volume.write_file("/d1/d2/file2.txt", "2")
    assert [e.name for e in volume.list("/d1")] == ["d2", "file1.txt"]
    deep = [e.path for e in volume.list("/d1", depth=3)]
    assert deep == ["/d1/d2", "/d1/d2/d3", "/d1/d2/file2.txt", "/d1/file1.txt"]
    with pytest.raises(VolumeException, match="depth must be at most 10"):
        volume.list("/d1", depth=11)
    with pytest.raises(VolumePathNotFoundException):
        volume.list("/none")

    updated = volume.update_metadata("/d1/file1.txt", uid=1001, mode=0o755)
    assert (updated.uid, updated.gid, updated.mode) == (1001, 1000, 0o755)
    with pytest.raises(VolumePathNotFoundException):
        volume.update_metadata("/none", uid=1)

    volume.remove("/d1")
    assert volume.exists("/d1") is False
    with pytest.raises(VolumePathNotFoundException):
        volume.remove("/d1")
    with pytest.raises(VolumeException, match="cannot remove the volume's root"):
        volume.remove("/")


def test_a_wrong_token_is_refused(volume: Volume) -> None:
    stranger = Volume(volume.volume_id, volume.name, token="not-a-token")  # noqa: S106  # a wrong one
    with pytest.raises(AuthenticationException, match="Invalid or expired volume token"):
        stranger.read_file("/anything")


@pytest.mark.anyio
async def test_async_volume() -> None:
    volume = await AsyncVolume.create(f"sdk-async-{uuid.uuid4().hex[:12]}")
    try:
        await volume.write_file("/a/b.txt", "async", force=True)
        assert await volume.read_file("/a/b.txt") == "async"
        assert [e.path for e in await volume.list("/", depth=2)] == ["/a", "/a/b.txt"]
        assert (await AsyncVolume.get_info(volume.volume_id)).name == volume.name
    finally:
        assert await AsyncVolume.destroy(volume.volume_id) is True
