"""Images that are not ours booted with envd as the container's program (BootImage init "envd":
nspawn's stub init, envd from the envd layer, the image's provisioning layer): a busybox:glibc
tree and Debian's debootstrap stage, each checked over the wire through sandboxd's proxy, killed
without a trace, and adopted again by a new NspawnRuntime."""

from __future__ import annotations

import resource
import uuid
from typing import TYPE_CHECKING

import httpx
import pytest

from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from tests.builds.wire import as_user, output, routed, run
from tests.sandboxd.inside import Traces, processes_seen_from
from tests.sandboxd.proxied import serve_proxy
from tests.waiting import wait_until_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sandboxd.runtime.nspawn.box import NspawnBox
    from sandboxd.runtime.spec import BootImage

pytestmark = [pytest.mark.root, pytest.mark.anyio]

# What envd.service's LimitNOFILE= asks for, as far as the host lets nspawn give it.
WANTED_NOFILE = min(1048576, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


@pytest.fixture(params=["busybox", "debian"])
def image(request: pytest.FixtureRequest) -> BootImage:
    image: BootImage = request.getfixturevalue(f"{request.param}_image")
    return image


@pytest.fixture
async def client(
    runtime: NspawnRuntime, image: BootImage
) -> AsyncIterator[tuple[httpx.AsyncClient, NspawnBox]]:
    box = await runtime.boot(uuid.uuid4().hex[:16], image)
    async with serve_proxy() as served:
        served.lookup.running[box.id] = box
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
            yield http, box


async def test_envd_is_the_stub_init_s_one_child_and_answers(
    client: tuple[httpx.AsyncClient, NspawnBox],
) -> None:
    http, box = client
    seen = processes_seen_from(box)
    assert (seen[1], seen[2]) == ("(sd-stubinit)", "python3")
    assert (await http.get("/health", headers=routed(box))).status_code == 204
    limits = await output(http, box, "cat /proc/2/limits", "root")
    (nofile,) = [line.split()[3:5] for line in limits.splitlines() if "open files" in line]
    assert nofile == [str(WANTED_NOFILE)] * 2
    # Its priority, given from the host as for envd.service (the container's root cannot).
    stat = await output(http, box, "cat /proc/2/stat", "root")
    assert int(stat.rsplit(")", 1)[1].split()[16]) == -20


async def test_commands_run_as_user_and_as_root(
    client: tuple[httpx.AsyncClient, NspawnBox], image: BootImage
) -> None:
    http, box = client
    code, out = await run(http, box, "id; pwd; echo $HOME", "user")
    assert code == 0
    user_id, cwd, home = out.splitlines()
    assert user_id.startswith("uid=1000(user) gid=1000(user)")
    assert (cwd, home) == ("/home/user", "/home/user")
    code, out = await run(http, box, "id -u; id -un; stat -c '%U %a' /home/user", "root")
    assert (code, out.split("\n")[:3]) == (0, ["0", "root", "user 755"])
    has_sudo = (image.layers[0] / "usr/bin/sudo").exists()
    code, out = await run(http, box, "sudo -n id -u", "user")
    assert (code, out) == ((0, "0\n") if has_sudo else (127, ""))


async def test_tmp_run_and_dev_shm_are_there_and_writable(
    client: tuple[httpx.AsyncClient, NspawnBox],
) -> None:
    http, box = client
    script = (
        "for d in /tmp /dev/shm; do echo x > $d/probe && rm $d/probe || exit 1; done; test -d /run"
    )
    assert await run(http, box, script, "user") == (0, "")


async def test_files_go_up_and_down_as_the_user(
    client: tuple[httpx.AsyncClient, NspawnBox],
) -> None:
    http, box = client
    params = {"path": "/home/user/up/hello.txt", "username": "user"}
    headers = {**routed(box), **as_user("user")}
    body = b"hello from the host\n" * 1000
    up = await http.post("/files", params=params, headers=headers, files={"file": body})
    assert up.status_code == 200, up.text
    down = await http.get("/files", params=params, headers=headers)
    assert (down.status_code, down.content) == (200, body)
    out = await output(http, box, "stat -c '%U:%G' /home/user/up /home/user/up/hello.txt", "root")
    assert out.split() == ["user:user", "user:user"]


async def test_orphans_are_reaped_by_the_stub_init(
    client: tuple[httpx.AsyncClient, NspawnBox],
) -> None:
    http, box = client
    orphan = int(await output(http, box, "sleep 1000 > /dev/null 2>&1 & echo $!", "user"))
    status = await output(http, box, f"grep PPid /proc/{orphan}/status", "root")
    assert status.split() == ["PPid:", "1"]  # its shell ended: adopted by the stub init
    assert (await run(http, box, f"kill {orphan}", "root"))[0] == 0

    async def reaped() -> bool:
        return (await run(http, box, f"test -e /proc/{orphan}", "root"))[0] != 0

    await wait_until_async(reaped, 30, "the killed orphan to be reaped (not left a zombie)")


async def test_a_kill_leaves_nothing(runtime: NspawnRuntime, busybox_image: BootImage) -> None:
    box = await runtime.boot(uuid.uuid4().hex[:16], busybox_image)
    traces = Traces.of(box)
    await runtime.kill(box)
    assert traces.left() == []


async def test_a_new_runtime_adopts_an_envd_init_sandbox(
    runtime: NspawnRuntime, busybox_image: BootImage
) -> None:
    box = await runtime.boot(uuid.uuid4().hex[:16], busybox_image)
    runtime.release(box)  # "restart": the old runtime's handles go
    again = NspawnRuntime(
        runtime.sandboxes_dir,
        cgroup_parent=runtime.cgroup_parent,
        probe=envd_ready,
        guest_unit=ENVD_UNIT,
    )
    (adopted,) = again.adopt()
    assert (adopted.id, adopted.leader_pid, adopted.image) == (
        box.id,
        box.leader_pid,
        busybox_image,
    )
    assert adopted.spec == box.spec
    assert await envd_ready(adopted.dialer)
    traces = Traces.of(adopted)
    await again.kill(adopted)
    assert traces.left() == []
