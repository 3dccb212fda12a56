"""A gateway's call to a node agent's API, by client: httpcore's connection pool (the gateway's
client before sandboxd.kept_http, and sandboxd's to envd for streamed answers) against
`KeptConnections`, in one run. The server is uvicorn (httptools, uvloop) in a process of its
own, serving a Starlette app shaped as the node's internal API: its forty routes behind the
cluster token's check, each answering a create's `SandboxInfo` (about 600 bytes of JSON) to a
create's `SandboxConfig`. Rounds of sequential calls over one kept connection, the clients
interleaved and reversed every other round; each call's time from before the request is
written to its answer's JSON decoded.

Target: `KeptConnections` at most half of httpcore's p50 (a create pays one such call).

Run: .venv/bin/python -m bench.node_calls [--rounds 10] [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import httpcore
import uvloop

from sandboxd.kept_http import KeptConnections, tcp

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    Client = tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[None]]]

SERVER = """
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from sandboxd.node.http_api import ClusterTokenGate

INFO = {"sandbox_id": "i" * 21, "template_id": "t" * 20, "alias": "base", "client_id": "node-a",
        "started_at": 1764400000000000, "end_at": 1764400300000000, "cpu_count": 2,
        "memory_mb": 512, "disk_size_mb": 2048, "envd_version": "0.6.13", "metadata": {},
        "state": "running", "envd_access_token": "e" * 64, "traffic_token": None,
        "team_id": "t" * 36, "cataloged": True, "domain": "sandbox.test",
        "network": {"allowOut": [], "denyOut": [], "allowPublicTraffic": True}}

async def operation(request):
    arguments = await request.json()
    return JSONResponse(INFO if "config" in arguments else None)

routes = [Route(f"/node/v1/op{i}", operation, methods=["POST"]) for i in range(39)]
routes.append(Route("/node/v1/create", operation, methods=["POST"]))
app = ClusterTokenGate(Starlette(routes=routes), "token")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            loop="uvloop", http="httptools")
"""

CONFIG = {"config": {"template": "base", "timeout_s": 300, "metadata": {"bench": "node_calls"},
                     "env_vars": {}, "secure": True, "allow_internet_access": True,
                     "team_id": "t" * 36, "catalog": True}}  # fmt: skip
BODY = json.dumps(CONFIG).encode()
HEADERS = [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer token"),
           (b"content-type", b"application/json")]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def httpcore_call(port: int) -> Client:
    pool = httpcore.AsyncConnectionPool(max_connections=64, keepalive_expiry=30)
    url = f"http://127.0.0.1:{port}/node/v1/create"

    async def call() -> object:
        answer = await pool.request("POST", url, headers=HEADERS[1:], content=BODY)
        assert answer.status == 200
        return json.loads(answer.content)

    return call, pool.aclose


def kept_call(port: int) -> Client:
    connections = KeptConnections(tcp("127.0.0.1", port), 30, (5, 60))

    async def call() -> object:
        status, answer = await connections.request(b"POST", b"/node/v1/create", HEADERS, BODY)
        assert status == 200
        return json.loads(answer)

    async def close() -> None:
        connections.close()

    return call, close


async def measure(rounds: int, calls: int, port: int) -> dict[str, list[float]]:
    clients = {"httpcore": httpcore_call(port), "KeptConnections": kept_call(port)}
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for call, _ in clients.values():  # each client's connection made, warm
        for _ in range(20):
            await call()
    for number in range(rounds):
        order = list(clients) if number % 2 == 0 else list(reversed(clients))
        for name in order:
            call = clients[name][0]
            for _ in range(calls):
                started = time.perf_counter()
                await call()
                samples[name].append(time.perf_counter() - started)
    for _, close in clients.values():
        await close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("the server did not come up")
                time.sleep(0.05)
        samples = uvloop.run(measure(args.rounds, args.calls, port))
    finally:
        server.terminate()
        server.wait()
    base = statistics.median(samples["httpcore"])
    print(f"{args.rounds} rounds of {args.calls} calls per client")
    print("| client | p50 ms | p95 ms | p50 / httpcore's |")
    print("|---|---|---|---|")
    for name, taken in samples.items():
        p50, p95 = statistics.median(taken), statistics.quantiles(taken, n=20)[-1]
        print(f"| {name} | {p50 * 1000:.3f} | {p95 * 1000:.3f} | {p50 / base:.2f} |")


if __name__ == "__main__":
    main()
