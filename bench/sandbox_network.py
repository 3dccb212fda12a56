"""Sandbox networking's cost, all inside the fake internet (tests/network/fake_internet.py:
serve, its sandboxes and every client in its `uplink` namespace, the servers in `internet`):

- create → first command through the unmodified Python SDK (bench/sdk_creator.py, run in
  `uplink`), on two serves in the same run, one networked and one with `--no-network`,
  interleaved; and the kill's latency on each. Cold (a boot per create) by default; with
  `--warm`, each serve keeps a warm pool of one and every create waits for it to be full
  first, so the create takes a booted sandbox (the usual case: its network was made at boot,
  the create only applies its rules). Target: p50 <= +10 ms with networking, warm.
- TCP throughput to a sink in `internet` (bench/tcp_sink.py) from a sandbox (forwarded, its
  own chain, masqueraded out of `uplink`) against from `uplink` itself to the same sink, the
  same sender (bench/tcp_send.py, by the same Debian python3 as the sandbox's), interleaved,
  median of per-round ratios. Target: >= 0.8x.

Run as root: .venv/bin/python -m bench.sandbox_network [--runs 20] [--rounds 5] [--mib 1024]
[--only create|throughput] [--warm] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import SdkCreator, p50_p95_ms, parse_args, scratch
from tests.network import probes
from tests.network.fake_internet import DNS_ADDRESS, NAMES, running_fake_internet
from tests.network.served import POOL, UplinkSandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from tests.network.fake_internet import FakeInternet

BENCH = Path(__file__).resolve().parent
SINK = (NAMES["example.test"], 5201)
# The sandbox's interpreter is Debian bookworm's; the host's /usr/bin/python3 is the same one.
SENDER_PYTHON = "/usr/bin/python3"


def wait_warm(server: UplinkSandboxd) -> None:
    """Until the server's pool holds a booted sandbox (one on the host the API does not list,
    whose boot serve has logged)."""

    def warm() -> bool:
        listed = {s["sandboxID"] for s in server.api("GET", "/sandboxes").json()}
        log = server.log.read_text()
        return any(box.name not in listed and f"sandbox {box.name} up in" in log
                   for box in server.box_dir("x").parent.iterdir())  # fmt: skip

    wait_until(warm, 300, "a warm sandbox")


def create_series(net: FakeInternet, plain: UplinkSandboxd, networked: UplinkSandboxd,
                  runs: int, warm: bool) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """Seconds of create → first command and of the kill, per server."""
    sdk = SdkCreator(prefix=("nsenter", f"--net={net.uplink.path}", "--"))
    servers = {"without": plain, "with": networked}
    series: dict[str, dict[str, list[float]]] = {n: {"total": [], "kill": []} for n in servers}
    try:
        for server in servers.values():  # untimed: the SDK's first use in its process
            server.kill(asyncio.run(sdk.create(server)).sandbox_id)
        for run in range(runs):
            order = list(servers.items()) if run % 2 == 0 else list(servers.items())[::-1]
            for name, server in order:
                if warm:
                    wait_warm(server)
                created = asyncio.run(sdk.create(server))
                series[name]["total"].append(created.total_s)
                begin = time.monotonic()
                server.kill(created.sandbox_id)
                series[name]["kill"].append(time.monotonic() - begin)
    finally:
        sdk.close()
    return series


def report_create(series: dict[str, dict[str, list[float]]], warm: bool) -> None:
    print(f"creates from a warm pool: {warm}")
    for name, samples in series.items():
        print(f"networking {name:7}: create → first command {p50_p95_ms(samples['total'])}")
        print(f"                    kill                    {p50_p95_ms(samples['kill'])}")
    with_p50 = statistics.median(series["with"]["total"])
    without_p50 = statistics.median(series["without"]["total"])
    print(f"create → first command p50 with - without networking: "
          f"{(with_p50 - without_p50) * 1000:+.1f} ms ({with_p50 / without_p50:.2f}x)")  # fmt: skip


def send_from_uplink(net: FakeInternet, size: int) -> float:
    done = net.uplink.run([SENDER_PYTHON, "-c", (BENCH / "tcp_send.py").read_text(),
                           SINK[0], str(SINK[1]), str(size)], capture_output=True)  # fmt: skip
    return float(done.stdout)


def send_from_sandbox(server: UplinkSandboxd, sandbox_id: str, size: int) -> float:
    code, out, err = server.run(sandbox_id, "python3", "-c", (BENCH / "tcp_send.py").read_text(),
                                SINK[0], str(SINK[1]), str(size))  # fmt: skip
    assert code == 0, err
    return float(out)


def throughput(net: FakeInternet, server: UplinkSandboxd, rounds: int, mib: int) -> None:
    net.internet.popen([sys.executable, "-m", "bench.tcp_sink", "0.0.0.0", str(SINK[1])],
                       cwd=BENCH.parent)  # fmt: skip
    wait_until(lambda: net.uplink.call(probes.connect_error, *SINK) is None, 30, "the sink")
    size = mib << 20
    sandbox_id = server.create()
    rates: dict[str, list[float]] = {"uplink": [], "sandbox": []}
    try:
        send_from_sandbox(server, sandbox_id, 16 << 20)  # untimed warm-up of both paths
        send_from_uplink(net, 16 << 20)
        for r in range(rounds):
            for name in ["uplink", "sandbox"] if r % 2 == 0 else ["sandbox", "uplink"]:
                if name == "uplink":
                    seconds = send_from_uplink(net, size)
                else:
                    seconds = send_from_sandbox(server, sandbox_id, size)
                rates[name].append(mib / seconds)
    finally:
        server.kill(sandbox_id)
    ratios = [s / u for s, u in zip(rates["sandbox"], rates["uplink"], strict=True)]
    for name, values in rates.items():
        print(f"TCP {mib} MiB to `internet` from {name:7}: median {statistics.median(values):7.0f}"
              f" MiB/s [{min(values):.0f}-{max(values):.0f}]")  # fmt: skip
    print(f"sandbox / uplink, median of per-round ratios: {statistics.median(ratios):.2f} "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--only", choices=["create", "throughput"])
    parser.add_argument("--warm", action="store_true", help="creates from a warm pool of one")
    args, template = parse_args(parser)
    with running_fake_internet() as net, scratch("sandbox-network-") as work:
        pool = ("--pool", "1" if args.warm else "0")
        plain = UplinkSandboxd(net, work / "plain", template, "--no-network", *pool)
        networked = UplinkSandboxd(net, work / "networked", template, "--network-pool", POOL,
                                   "--dns", DNS_ADDRESS, *pool)  # fmt: skip
        try:
            plain.start()
            networked.start()
            print(f"load average (1 min) at start: {os.getloadavg()[0]:.1f}")
            if args.only in (None, "create"):
                report_create(create_series(net, plain, networked, args.runs, args.warm), args.warm)
            if args.only in (None, "throughput"):
                throughput(net, networked, args.rounds, args.mib)
            print(f"load average (1 min) at end: {os.getloadavg()[0]:.1f}")
        finally:
            try:
                plain.clean_up()
            finally:
                networked.clean_up()


if __name__ == "__main__":
    main()
