"""Host directories mounted into booted sandboxes (the runtime's `mounts`): read-write and shared
between sandboxes, each of which sees the files' canonical ids as its own root and `user`
while the host keeps them canonical; kept on adoption, gone with the sandbox and the files
left; and links the sandbox's root holds at a mount's path never lead the mount out of it."""

from __future__ import annotations

import asyncio
import os
import shlex
import uuid
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import BootError, SandboxError
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.host.removal import mounts_under
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.nspawn.steps import SandboxDirs
from sandboxd.runtime.spec import BootImage, VolumeMount
from tests.sandboxd.inside import Traces, run, sandbox_ids_left

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.runtime.nspawn.box import NspawnBox

pytestmark = [pytest.mark.root, pytest.mark.anyio]

USER = 1000  # `user` in the base template, and a volume's canonical owner of its files


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def as_user(box: NspawnBox, script: str) -> str:
    return run(box, f"runuser -u user -- sh -c {shlex.quote(script)}")


def shared_dir(path: Path) -> Path:
    """A directory as a volume's root is: owned by `user`, 0755."""
    path.mkdir(mode=0o755)
    os.chown(path, USER, USER)
    return path


async def test_one_directory_in_two_sandboxes_with_canonical_ids_on_the_host(
    runtime: NspawnRuntime, base_template: Path, tmp_path: Path
) -> None:
    shared, outer = shared_dir(tmp_path / "shared"), shared_dir(tmp_path / "outer")
    image = BootImage((base_template,))
    # b's listed inner first: the outer one is mounted first, the inner one's point made in it.
    b_mounts = (VolumeMount(shared, "/data/shared"), VolumeMount(outer, "/data"))
    a, b = await asyncio.gather(
        runtime.boot(new_id(), image, mounts=(VolumeMount(shared, "/mnt/data"),)),
        runtime.boot(new_id(), image, mounts=b_mounts),
    )
    assert a.uid_base != b.uid_base
    run(a, "echo from-a > /mnt/data/by-root")
    as_user(b, "echo from-b > /data/shared/by-user && mkdir /data/shared/dir")
    assert run(b, "cat /data/shared/by-root") == "from-a\n"
    assert run(a, "cat /mnt/data/by-user") == "from-b\n"
    listing = "stat -c '%n %U %u' {0} {0}/by-root {0}/by-user {0}/dir"
    for box, where in ((a, "/mnt/data"), (b, "/data/shared")):
        owners = as_user(box, listing.format(where)).split("\n")
        assert owners[:4] == [f"{where} user 1000", f"{where}/by-root root 0",
                              f"{where}/by-user user 1000", f"{where}/dir user 1000"]  # fmt: skip
    assert as_user(a, "test -w /mnt/data/by-root || echo read-only") == "read-only\n"
    # On the host: the ids the files have inside, not either sandbox's range.
    assert [os.stat(shared / n).st_uid for n in ("by-root", "by-user", "dir")] == [0, USER, USER]
    assert os.stat(outer / "shared").st_uid == 0  # the inner mount's point, made as b's root

    traces = [Traces.of(a), Traces.of(b)]
    # A restart: the next runtime finds b with its mounts, which stayed.
    runtime.release(b)
    successor = NspawnRuntime(runtime.sandboxes_dir, cgroup_parent=runtime.cgroup_parent,
                              probe=envd_ready, guest_unit=ENVD_UNIT)  # fmt: skip
    adopted = {box.id: box for box in successor.adopt()}
    successor.release(adopted[a.id])
    assert adopted[b.id].mounts == b.mounts
    await runtime.kill(a)
    assert run(b, "cat /data/shared/by-root") == "from-a\n"  # a's end unmounts only a's
    await successor.kill(adopted[b.id])
    assert [t.left() for t in traces] == [[], []]
    assert mounts_under(shared) == mounts_under(outer) == []
    assert (shared / "by-root").read_text() == "from-a\n"


def link_layer(layer: Path, links: dict[str, str], dirs: list[str]) -> Path:
    """A layer (above the template's) holding `links` (path inside → link target) and `dirs`."""
    for path in dirs:
        (layer / path.lstrip("/")).mkdir(parents=True)
    for path, target in links.items():
        (layer / path).parent.mkdir(parents=True, exist_ok=True)
        (layer / path).symlink_to(target)
    return layer


async def test_links_at_a_mount_path_resolve_inside_the_sandbox(
    runtime: NspawnRuntime, base_template: Path, tmp_path: Path
) -> None:
    """As nspawn's --bind resolves its destination: a link is followed within the sandbox's
    root (an absolute one or `..` past its top end there, never on the host's directory of that
    name), one to nothing leads to its target, made; a path through a file or to the root
    itself fails the boot."""
    shared = shared_dir(tmp_path / "shared")
    (shared / "marker").write_text("volume\n")
    on_host = tmp_path / "host-dir"
    on_host.mkdir()
    layer = link_layer(tmp_path / "links", {
        "mnt/srv": "/srv",
        "mnt/absolute": str(on_host),
        "mnt/dots": "../../../../../../../../.." + str(on_host),
        "mnt/dangling": "../nowhere/deeper",
        "mnt/top": "/",
    }, dirs=[str(on_host)])  # fmt: skip
    (layer / "mnt/file").write_text("")
    image = BootImage((base_template, layer))
    box = await runtime.boot(new_id(), image, mounts=(
        VolumeMount(shared, "/mnt/srv/s"), VolumeMount(shared, "/mnt/dangling/n"),
        VolumeMount(shared, "/mnt/absolute/a"), VolumeMount(shared, "/mnt/dots/d")))  # fmt: skip
    inside = run(box, "cat /mnt/srv/s/marker /srv/s/marker /nowhere/deeper/n/marker")
    assert inside == "volume\n" * 3
    assert run(box, "stat -c %U /nowhere /nowhere/deeper") == "root\nroot\n"
    # The sandbox's own directory of the host directory's name (under its /tmp, which its
    # systemd covers with a tmpfs: looked at from the host, in its root).
    in_root = SandboxDirs(box.dir).root / on_host.relative_to("/")
    assert [(in_root / d / "marker").read_text() for d in "ad"] == ["volume\n"] * 2
    assert list(on_host.iterdir()) == []
    assert mounts_under(on_host) == []
    await runtime.kill(box)

    for path, why in (
        ("/mnt/file/x", "at /mnt/file/x: file is not a directory"),
        ("/mnt/top", "at /mnt/top: /mnt/top is the root directory itself"),
    ):
        with pytest.raises(BootError, match=why):
            await runtime.boot(new_id(), image, mounts=(VolumeMount(shared, path),))
    assert sandbox_ids_left(runtime) == []
    assert list(on_host.iterdir()) == []
    assert (shared / "marker").read_text() == "volume\n"


@pytest.mark.parametrize(
    ("inside", "why"),
    [("mnt/data", "must be absolute"), ("/mnt/../etc", "'.' or '..'"), ("/mnt/data/", "'.'"),
     ("/", "the root"), ("", "empty")],
)  # fmt: skip
async def test_a_mount_path_that_is_not_one_is_refused(
    runtime: NspawnRuntime, base_template: Path, tmp_path: Path, inside: str, why: str
) -> None:
    with pytest.raises(SandboxError, match=why):
        await runtime.boot(
            new_id(), BootImage((base_template,)), mounts=(VolumeMount(tmp_path, inside),)
        )
    assert sandbox_ids_left(runtime) == []


async def test_a_path_used_twice_is_refused(
    runtime: NspawnRuntime, base_template: Path, tmp_path: Path
) -> None:
    twice = (VolumeMount(tmp_path, "/data"), VolumeMount(tmp_path / "x", "/data"))
    with pytest.raises(SandboxError, match="used twice"):
        await runtime.boot(new_id(), BootImage((base_template,)), mounts=twice)
    assert sandbox_ids_left(runtime) == []
