"""The connection policy of `sandboxd serve`'s port: heads and control bodies that do not come
in time are cut, and past the connection cap a new connection evicts an idle one, so the API
and the proxy stay reachable under a slowloris flood. The limits are shortened for the test
through the server's hidden environment variables."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.root

MAX_CONNECTIONS = 100
SLOW_CONNECTIONS = 300  # more than the descriptors the server is left with (below)


@contextlib.contextmanager
def serving_with(base_template: Path, state: Path, **env: str) -> Iterator[Sandboxd]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        with running_sandboxd(state, base_template, NO_NETWORK) as s:
            yield s


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    """Heads and control bodies get a second."""
    state = tmp_path_factory.mktemp("deadlines") / "state"
    with serving_with(base_template, state, SANDBOXD_HEADER_TIMEOUT_S="1",
                      SANDBOXD_BODY_TIMEOUT_S="1") as s:  # fmt: skip
        yield s


@pytest.fixture
def capped(tmp_path: Path, base_template: Path) -> Iterator[Sandboxd]:
    """The default deadlines (the flood's heads stay open), and a cap of MAX_CONNECTIONS."""
    with serving_with(base_template, tmp_path / "state",
                      SANDBOXD_MAX_CONNECTIONS=str(MAX_CONNECTIONS)) as s:  # fmt: skip
        yield s


def _address(server: Sandboxd) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _answer_then_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(30)  # only bounds how long a broken server takes to fail the test
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_head_that_does_not_arrive_in_time_is_cut(server: Sandboxd) -> None:
    """A byte every few seconds held a connection forever (2000 of them were held)."""
    with socket.create_connection(_address(server)) as sock:
        sock.sendall(b"GET /heal")
        assert _answer_then_close(sock).startswith(b"HTTP/1.1 408")


def test_a_control_body_that_does_not_arrive_in_time_is_cut(server: Sandboxd) -> None:
    with socket.create_connection(_address(server)) as sock:
        sock.sendall(
            b"POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"templ'
            % API_KEY.encode()
        )
        _answer_then_close(sock)  # closed: the test would time out otherwise
    assert httpx.get(server.url + "/health").status_code == 204


def test_the_api_stays_reachable_past_the_descriptors_a_flood_would_take(
    capped: Sandboxd,
) -> None:
    server = capped
    # The server keeps 200 descriptors: enough for its own work and the connection cap, not
    # for every connection of the flood.
    subprocess.run(["prlimit", "--pid", str(server.pid), "--nofile=200:200"], check=True)
    with contextlib.ExitStack() as held:
        for _ in range(SLOW_CONNECTIONS):
            sock = held.enter_context(socket.create_connection(_address(server)))
            sock.sendall(b"G")  # the first byte of a head that never ends

        def health() -> bool:
            try:
                return httpx.get(server.url + "/health", timeout=5).status_code == 204
            except httpx.TransportError:
                return False

        wait_until(health, 30, "GET /health to be answered while the flood is held")
    with httpx.Client(base_url=server.url, headers=server.headers) as api:
        assert api.get("/templates").status_code == 200
