"""Volumes mounted through the SDK (normal mode only): `Sandbox.create(volume_mounts=...)` by
`Volume` and by name, one volume in two sandboxes at once, each seeing the other's writes (a
`files.watch_dir` on one reports the other's), ownership as root and `user` wrote, the mounts in
`get_info()`, the refusals, and the volume outliving both."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from e2b import FilesystemEventType, Sandbox, SandboxException, Volume

from tests.sdk.python import sandboxes
from tests.sdk.python.mode import normal_only
from tests.sdk.python.sandboxes import create
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from e2b.sandbox_sync.filesystem.watch_handle import WatchHandle

pytestmark = normal_only
made = sandboxes.made


@pytest.fixture
def volume() -> Iterator[Volume]:
    made_volume = Volume.create(f"sdk-{uuid.uuid4().hex[:8]}")
    yield made_volume
    Volume.destroy(made_volume.volume_id)


def written(handle: WatchHandle, name: str, seen: list[tuple[FilesystemEventType, str]]) -> bool:
    seen += [(e.type, e.name) for e in handle.get_new_events()]
    return (FilesystemEventType.WRITE, name) in seen


def test_one_volume_in_two_sandboxes(made: list[Sandbox], volume: Volume) -> None:
    a = create(made, volume_mounts={"/mnt/data": volume}, timeout=120)
    b = create(made, volume_mounts={"/home/user/data": volume.name}, timeout=120)
    assert a.get_info().volume_mounts == [{"name": volume.name, "path": "/mnt/data"}]
    assert b.get_info().volume_mounts == [{"name": volume.name, "path": "/home/user/data"}]

    handle = b.files.watch_dir("/home/user/data")
    try:
        a.files.write("/mnt/data/from-a.txt", "written in a")
        seen: list[tuple[FilesystemEventType, str]] = []
        wait_until(lambda: written(handle, "from-a.txt", seen), 30, "b's watch to see a's write")
    finally:
        handle.stop()
    assert b.files.read("/home/user/data/from-a.txt") == "written in a"
    b.commands.run("echo written in b > /home/user/data/from-b.txt", user="root")
    assert a.files.read("/mnt/data/from-b.txt") == "written in b\n"
    for sandbox, where in ((a, "/mnt/data"), (b, "/home/user/data")):
        for user in ("root", "user"):
            owners = sandbox.commands.run(f"cd {where} && stat -c '%n %U %u' *", user=user)
            assert owners.stdout == "from-a.txt user 1000\nfrom-b.txt root 0\n"

    for sandbox in (a, b):
        assert sandbox.kill() is True
    c = create(made, volume_mounts={"/data": volume}, timeout=120)
    assert c.files.read("/data/from-a.txt") == "written in a"
    assert c.kill() is True


def test_bad_mounts_are_refused_in_one_message(volume: Volume) -> None:
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(volume_mounts={"relative": volume, "/ok": "no-such-volume"})
    assert str(refused.value) == (
        "400: invalid mounts:\n"
        "\t- volume mount #0: path must be absolute\n"
        "\t- volume mount #1: volume 'no-such-volume' not found"
    )
