"""Auto-resume on traffic over the wire (`autoResume: {"enabled": true}`): a request through the
proxy to any port of a paused sandbox, envd's or its own, resumes it and is answered; concurrent
requests resume it once; without auto-resume, paused to disk, or killed it stays as it is
(E2B's 502); a request without the sandbox's token resumes nothing (E2B's 403)."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import pytest

from sandboxd.store.sqlite.database import DB_FILE
from tests.sandboxd.guest_shell import background
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.sandboxd.serving import Sandboxd

pytestmark = pytest.mark.root

AUTO_RESUME: dict[str, Any] = {"autoPause": True, "autoResume": {"enabled": True}}
PORT = 8000  # python3 -m http.server's
WAKE_REFUSED = ("This sandbox can't be resumed with the credentials provided. "
                "Check your access token and try again.")  # fmt: skip
PAUSE_S = 120  # how long a broken evictor takes to fail a test, not a speed bound


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    with running_sandboxd(tmp_path_factory.mktemp("auto-resume"), base_template, NO_NETWORK) as s:
        yield s


def create(api: httpx.Client, timeout: int = 300, **body: Any) -> dict[str, Any]:
    """A sandbox of the base template (secure, as every /v2 create): the create's answer."""
    created = api.post("/v2/sandboxes", json={"templateID": "base", "timeout": timeout, **body})
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


def ids(created: dict[str, Any]) -> tuple[str, str]:
    return created["sandboxID"], created["envdAccessToken"]


def to_port(sandbox_id: str, port: int, **headers: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port), **headers}


def to_envd(sandbox_id: str, token: str) -> dict[str, str]:
    return to_port(sandbox_id, 49983, **{"X-Access-Token": token})


def gone(sandbox_id: str) -> dict[str, object]:
    return {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}


def info(api: httpx.Client, sandbox_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = api.get(f"/sandboxes/{sandbox_id}").json()
    return answer


def life_s(api: httpx.Client, sandbox_id: str) -> float:
    """endAt - startedAt of the sandbox, in seconds."""
    shown = info(api, sandbox_id)
    ends = [datetime.fromisoformat(shown[k]) for k in ("startedAt", "endAt")]
    return (ends[1] - ends[0]).total_seconds()


def resumes(server: Sandboxd, sandbox_id: str) -> int:
    """How many resumes of the sandbox the store recorded."""
    uri = f"file:{server.state_dir / DB_FILE}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        query = "SELECT count(*) FROM events WHERE sandbox_id = ? AND kind = 'resumed'"
        count: int = db.execute(query, (sandbox_id,)).fetchone()[0]
    return count


def at_once(server: Sandboxd, path: str, headers: dict[str, str], count: int) -> list[int]:
    """The statuses of `count` GETs of `path`, each on a connection of its own, all opened
    first and then sent together: they arrive within the time a resume takes."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Connection: close\r\n\r\n"
    address = urlsplit(server.url)
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.create_connection(
            (address.hostname, address.port), timeout=60)) for _ in range(count)]  # fmt: skip
        for sock in sockets:
            sock.sendall(request.encode())
        return [int(answer(sock).split(b" ", 2)[1]) for sock in sockets]


def answer(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection."""
    received = []
    while chunk := sock.recv(65536):
        received.append(chunk)
    return b"".join(received)


def pause(api: httpx.Client, sandbox_id: str, **body: Any) -> None:
    assert api.post(f"/sandboxes/{sandbox_id}/pause", json=body).status_code == 204
    assert info(api, sandbox_id)["state"] == "paused"


def test_a_request_to_any_port_wakes_a_paused_sandbox(server: Sandboxd) -> None:
    with server.client() as api, httpx.Client(base_url=server.url, timeout=60) as proxy:
        sid, token = ids(create(api, **AUTO_RESUME))
        background(server, sid, f"cd /tmp && exec python3 -m http.server {PORT}", token)
        wait_until(lambda: proxy.get("/", headers=to_port(sid, PORT)).status_code == 200, 30,
                   "the server in the sandbox to answer through the proxy")  # fmt: skip
        pause(api, sid)
        # Its own port: held while the sandbox resumes, then served by the server it ran.
        assert proxy.get("/", headers=to_port(sid, PORT)).status_code == 200
        assert info(api, sid)["state"] == "running"
        assert life_s(api, sid) == 300  # the create's timeout, from the resume
        assert resumes(server, sid) == 1
        # envd's port (the SDKs' is_running(), files and commands) wakes it too.
        pause(api, sid)
        assert proxy.get("/health", headers=to_envd(sid, token)).status_code == 204
        assert info(api, sid)["state"] == "running"
        assert resumes(server, sid) == 2
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
        # Killed: nothing to wake.
        answer = proxy.get("/health", headers=to_envd(sid, token))
        assert (answer.status_code, answer.json()) == (502, gone(sid))


def test_concurrent_requests_resume_it_once(server: Sandboxd) -> None:
    with server.client() as api:
        sid, token = ids(create(api, timeout=5, **AUTO_RESUME))
        wait_until(lambda: info(api, sid).get("pauseMode") == "full", PAUSE_S,
                   "the sandbox to pause itself at its end")  # fmt: skip
        assert at_once(server, "/health", to_envd(sid, token), 8) == [204] * 8
        assert resumes(server, sid) == 1
        assert life_s(api, sid) == 60  # a 5 s timeout: woken for the minimum, a minute
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def test_without_auto_resume_or_paused_to_disk_it_stays_paused(server: Sandboxd) -> None:
    with server.client() as api, httpx.Client(base_url=server.url, timeout=60) as proxy:
        plain, plain_token = ids(create(api, autoPause=True))
        on_disk, disk_token = ids(create(api, **AUTO_RESUME))
        pause(api, plain)
        pause(api, on_disk, memory=False)  # a filesystem-only pause is resumed explicitly
        for sid, token in ((plain, plain_token), (on_disk, disk_token)):
            answer = proxy.get("/health", headers=to_envd(sid, token))
            assert (answer.status_code, answer.json()) == (502, gone(sid))
            assert proxy.get("/", headers=to_port(sid, PORT)).json() == gone(sid)
            assert info(api, sid)["state"] == "paused"
            assert resumes(server, sid) == 0
            connected = api.post(f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
            assert connected.status_code == 201, connected.text
            assert proxy.get("/health", headers=to_envd(sid, token)).status_code == 204
            assert api.delete(f"/sandboxes/{sid}").status_code == 204
        unknown = proxy.get("/health", headers=to_envd("nosuchsandbox", "x"))
        assert (unknown.status_code, unknown.json()) == (502, gone("nosuchsandbox"))


def test_a_request_without_the_token_resumes_nothing(server: Sandboxd) -> None:
    private: dict[str, Any] = {"network": {"allowPublicTraffic": False}}
    with server.client() as api, httpx.Client(base_url=server.url, timeout=60) as proxy:
        created = create(api, **AUTO_RESUME, **private)
        sid, token = ids(created)
        traffic = created["trafficAccessToken"]
        pause(api, sid)
        refused = [
            to_envd(sid, "0" * len(token)),
            to_port(sid, 49983),
            to_port(sid, PORT),
            to_port(sid, PORT, **{"e2b-traffic-access-token": traffic[::-1]}),
            to_port(sid, PORT, **{"X-Access-Token": token}),  # envd's token is not the traffic's
        ]
        for headers in refused:
            answer = proxy.get("/", headers=headers)
            assert answer.status_code == 403, headers
            assert answer.json() == {"sandboxId": sid, "message": WAKE_REFUSED, "code": 403}
        assert info(api, sid)["state"] == "paused"
        assert resumes(server, sid) == 0
        # The traffic token wakes it from its own port (no server there: the port's 502).
        woken = proxy.get("/", headers=to_port(sid, PORT, **{"e2b-traffic-access-token": traffic}))
        assert woken.status_code == 502
        assert woken.json()["message"] == "The sandbox is running but port is not open"
        assert info(api, sid)["state"] == "running"
        assert api.delete(f"/sandboxes/{sid}").status_code == 204
