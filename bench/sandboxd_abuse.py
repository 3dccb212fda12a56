"""sandboxd's `GET /health` under abusive clients, against the same server idle (baseline):
3 clients posting the largest body a create takes (1 MiB, parsed and refused: unknown
template) back to back, 3 clients declaring 200 MB bodies (refused from the head), and 2000
connections each holding half a request head ("slowloris"). Target: p99 < 50 ms in each
phase. Before the body caps and the connection policy, one 200 MB body stalled /health for
7.8 s and 2000 slow connections were all held.

/health is asked by bench.sandboxd_fleet's probe thread (50 a second, with the probe's own
run-queue wait subtracted in a second figure), and sandboxd's CPU per second of each phase.
Run as root: .venv/bin/python -m bench.sandboxd_abuse [--seconds 10] [--template DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import threading
import time
from typing import TYPE_CHECKING

import httpx

from bench.sandboxd_fleet import HealthProbe, probed_server
from bench.sandboxd_lifecycle import parse_args, percentile

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.sandboxd.serving import Sandboxd

BODY_CLIENTS = 3
SLOW_CONNECTIONS = 2000
LARGEST_CREATE = b'{"templateID": "nosuch", "metadata": {"pad": "%s"}}' % (b"x" * ((1 << 20) - 64))


def _posting(server: Sandboxd, stop: threading.Event) -> None:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as api:
        while not stop.is_set():
            status = api.post("/sandboxes", content=LARGEST_CREATE,
                              headers={"content-type": "application/json"}).status_code  # fmt: skip
            assert status == 404, status  # parsed whole, then the template is unknown


def _declaring(server: Sandboxd, stop: threading.Event) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    head = (b"POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
            b"Content-Length: 200000000\r\n\r\n" % server.headers["X-API-Key"].encode())  # fmt: skip
    while not stop.is_set():
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + b"x" * 65536)
            assert sock.recv(65536).startswith(b"HTTP/1.1 413")


def _phase(probe: HealthProbe, name: str, seconds: float,
           load: Callable[[threading.Event], None] | None, threads: int) -> None:  # fmt: skip
    stop = threading.Event()
    workers = [threading.Thread(target=load, args=(stop,), daemon=True)
               for _ in range(threads if load else 0)]  # fmt: skip
    for w in workers:
        w.start()
    probe.enter(name)
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    args, template = parse_args(parser)
    with probed_server(template, "sandboxd-abuse-") as (server, probe):
        time.sleep(args.seconds)
        _phase(probe, "1 MiB bodies", args.seconds,
               lambda stop: _posting(server, stop), BODY_CLIENTS)  # fmt: skip
        _phase(probe, "200 MB declared", args.seconds,
               lambda stop: _declaring(server, stop), BODY_CLIENTS)  # fmt: skip
        host, port = server.url.removeprefix("http://").split(":")
        with contextlib.ExitStack() as held:
            for _ in range(SLOW_CONNECTIONS):
                sock = held.enter_context(socket.create_connection((host, int(port))))
                sock.sendall(b"GET /heal")
            _phase(probe, f"{SLOW_CONNECTIONS} slow", args.seconds, None, 0)
    cpu = probe.cpu_per_s()
    for phase, samples in probe.phases.items():
        ms = [took * 1000 for took, _ in samples]
        own = [less * 1000 for _, less in samples]
        print(
            f"GET /health {phase:16}: p50 {statistics.median(ms):6.2f} ms, "
            f"p99 {percentile(ms, 0.99):6.2f} ms (less run-queue wait: "
            f"{percentile(own, 0.99):6.2f}), max {max(ms):7.2f} ms, n={len(ms)}; "
            f"sandboxd CPU {cpu.get(phase, 0):5.0f} ms/s"
        )


if __name__ == "__main__":
    main()
