"""The log routes over the wire against a sandbox whose root plants links in its own journal
directory. sandboxd reads the journal as host root through /proc/LEADER/root, where an absolute
link resolves against the host: a link to another sandbox's journal (through its
/proc/PID/root) or to a host directory was read and served, and each linked directory was read
whole before `limit` was applied."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.guest.client import EnvdClient
from sandboxd.guest.commands import POSIX_SH, Command, run
from sandboxd.runtime.nspawn import container
from tests.sandboxd.serving import NO_NETWORK, Sandboxd, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    import httpx

pytestmark = pytest.mark.root

COUNTED = 3000  # entries one sandbox writes: many more than a page


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("logs") / "state", base_template,
                          NO_NETWORK) as s:  # fmt: skip
        yield s


@pytest.fixture
def api(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def create(api: httpx.Client) -> str:
    response = api.post("/sandboxes", json={"templateID": "base", "timeout": 300, "secure": False})
    assert response.status_code == 201, response.text
    return str(response.json()["sandboxID"])


def leader(server: Sandboxd, sandbox_id: str) -> int:
    supervisor = container.supervisor(server.cgroups(sandbox_id))
    found = container.leader(supervisor) if supervisor else None
    assert found is not None
    return found


def as_root(server: Sandboxd, sandbox_id: str, script: str) -> str:
    """The stdout of `sh -c script` run by the sandbox's envd as root (the SDK's
    `commands.run(..., user="root")`); it must exit 0."""
    out: list[bytes] = []

    async def started() -> int:
        netns = server.netns(sandbox_id)
        client = EnvdClient()
        client.reach(sandbox_id, netns)
        try:
            return await run(client, sandbox_id, Command(script, POSIX_SH),
                             on_output=lambda kind, data: out.append(data), timeout_s=120)  # fmt: skip
        finally:
            await client.aclose()
            netns.close()

    code = asyncio.run(started())
    assert code == 0, f"{script!r} in {sandbox_id}: {b''.join(out)!r}"
    return b"".join(out).decode()


def messages(api: httpx.Client, sandbox_id: str, **params: str | int) -> list[str]:
    """The messages of one v2 page, in its order."""
    response = api.get(f"/v2/sandboxes/{sandbox_id}/logs", params=params)
    assert response.status_code == 200, response.text
    return [e["message"] for e in response.json()["logs"]]


def messages_v1(api: httpx.Client, sandbox_id: str, **params: str | int) -> list[str]:
    response = api.get(f"/sandboxes/{sandbox_id}/logs", params=params)
    assert response.status_code == 200, response.text
    return [e["message"] for e in response.json()["logEntries"]]


def newest(api: httpx.Client, sandbox_id: str) -> list[str]:
    return messages(api, sandbox_id, direction="backward", limit=1000)


def log_marker(server: Sandboxd, api: httpx.Client, sandbox_id: str) -> str:
    """A unique line written to the sandbox's journal, once its logs show it."""
    marker = f"marker-{uuid.uuid4().hex}"
    as_root(server, sandbox_id, f"logger -t logtest {marker}")
    wait_until(lambda: marker in newest(api, sandbox_id), 30, f"{marker} in {sandbox_id}'s logs")
    return marker


def journal_dir(leader_pid: int) -> Path:
    """The sandbox's machine-id directory as the host reaches it (read here by the test, from
    a sandbox that planted nothing)."""
    (machine,) = Path(f"/proc/{leader_pid}/root/run/log/journal").iterdir()
    return machine


def test_links_to_another_sandboxs_or_the_hosts_journal_are_not_read(
    server: Sandboxd, api: httpx.Client, tmp_path: Path
) -> None:
    a, b = create(api), create(api)
    since_ms = time.time_ns() // 1_000_000 - 1
    marker_a = log_marker(server, api, a)
    a_journal = journal_dir(leader(server, a))
    host_journal = tmp_path / "journal" / a_journal.name  # a host directory with A's lines
    host_journal.mkdir(parents=True)
    shutil.copy(a_journal / "system.journal", host_journal / "system.journal")
    plant = {
        "a-root": f"/proc/{leader(server, a)}/root/run/log/journal",
        "a-machine": str(a_journal),
        "host-root": str(host_journal.parent),
        "host-machine": str(host_journal),
        "$(cat /etc/machine-id)/a.journal": str(a_journal / "system.journal"),
        "$(cat /etc/machine-id)/host.journal~": str(host_journal / "system.journal"),
    }
    links = [f"ln -s {shlex.quote(target)} {name}" for name, target in plant.items()]
    # and a file journalctl cannot read, which must not cost B its own lines
    junk = "head -c 4096 /dev/urandom > $(cat /etc/machine-id)/junk.journal~"
    as_root(server, b, " && ".join(["cd /run/log/journal", *links, junk]))
    marker_b = log_marker(server, api, b)
    pages = {
        "v1": messages_v1(api, b, start=since_ms),
        "v2 forward": messages(api, b, cursor=since_ms),
        "v2 backward": newest(api, b),
    }
    for route, page in pages.items():
        assert marker_b in page, route
        assert marker_a not in page, route
    assert marker_a in newest(api, a)  # A's own logs still have it
    for sandbox_id in (a, b):
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204


def test_many_links_and_a_long_journal_give_one_page_of_its_own_entries(
    server: Sandboxd, api: httpx.Client
) -> None:
    """40 links to the sandbox's own journal (directories and files) read it 41 times over
    before `limit` was applied: each page was a page of copies."""
    b = create(api)
    since_ms = time.time_ns() // 1_000_000 - 1
    as_root(server, b, f"seq 1 {COUNTED} | systemd-cat -t counting")
    wait_until(lambda: str(COUNTED) in newest(api, b), 30, "the last count in the logs")
    own = journal_dir(leader(server, b))
    as_root(server, b, f"cd /run/log/journal && for i in $(seq 1 40); do "
                       f"ln -s {own} dir$i && ln -s {own}/system.journal {own.name}/f$i.journal; "
                       "done")  # fmt: skip
    limit = 50
    forward = messages(api, b, cursor=since_ms, limit=limit)
    v1 = messages_v1(api, b, start=since_ms, limit=limit)
    backward = messages(api, b, direction="backward", limit=limit)
    for page in (forward, v1, backward):
        assert len(page) == limit
    counts = [[int(m) for m in page if m.isdigit()] for page in (forward, v1, backward)]
    assert counts[0] == counts[1] == list(range(1, len(counts[0]) + 1)), forward
    assert len(counts[0]) > limit // 2  # the page is the count, once
    assert counts[2] == list(range(COUNTED, COUNTED - len(counts[2]), -1)), backward
    assert len(counts[2]) > limit // 2
    assert api.delete(f"/sandboxes/{b}").status_code == 204
