"""Connection setup through the domain proxy against going direct, all inside the fake internet
(tests/network/fake_internet.py: serve and its sandboxes in its `uplink` namespace, the echo
server in `internet`): from inside a sandbox, COUNT sequential TCP connects, each with one small
HTTP GET read to its end (bench/http_rtt.py, by the sandbox's python3), to example.test's echo
server on port 80,

- direct: a sandbox with no network rules (forwarded, its own chain, masqueraded out of
  `uplink`);
- proxied: a sandbox with allowOut ["example.test"] and denyOut ["0.0.0.0/0"], whose port 80 is
  redirected to serve's domain proxy, which reads the Host header, resolves the name and dials
  the echo server itself.

Both sandboxes on one serve, batches interleaved (the order alternating by round), p50 and p90
of every connection, and the p50 the proxy adds. Target: <= 1 ms added. The untimed warm-up
sends example.test's name to other.test's address, which shows each path for what it is: the
direct one lands on other.test, the proxied one on example.test.

Run as root: .venv/bin/python -m bench.domain_proxy [--count 200] [--rounds 5] [--template DIR]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench.sandboxd_lifecycle import parse_args, percentile, scratch
from tests.network.fake_internet import DNS_ADDRESS, NAMES, running_fake_internet
from tests.network.served import POOL, UplinkSandboxd

BENCH = Path(__file__).resolve().parent
NAME = "example.test"
ADDRESS, OTHER = NAMES[NAME], NAMES["other.test"]
NETWORKS = {"direct": {}, "proxied": {"allowOut": [NAME], "denyOut": ["0.0.0.0/0"]}}


def round_trips(
    server: UplinkSandboxd, sandbox_id: str, count: int, address: str = ADDRESS
) -> tuple[list[float], str]:
    """Seconds of each of COUNT connect + GET round trips from the sandbox to ADDRESS asking
    for NAME, and the address of the echo server that answered."""
    code, out, err = server.run(sandbox_id, "python3", "-c", (BENCH / "http_rtt.py").read_text(),
                                address, NAME, str(count))  # fmt: skip
    assert code == 0, err
    measured = json.loads(out)
    return measured["seconds"], measured["server"]


def measure(server: UplinkSandboxd, count: int, rounds: int) -> dict[str, list[float]]:
    sandboxes = {name: server.create(network=network) for name, network in NETWORKS.items()}
    samples: dict[str, list[float]] = {name: [] for name in sandboxes}
    try:
        for name, sandbox_id in sandboxes.items():  # untimed warm-up of both paths
            _, landed = round_trips(server, sandbox_id, 20, address=OTHER)
            assert landed == {"direct": OTHER, "proxied": ADDRESS}[name], (name, landed)
        for r in range(rounds):
            order = list(sandboxes.items()) if r % 2 == 0 else list(sandboxes.items())[::-1]
            for name, sandbox_id in order:
                samples[name] += round_trips(server, sandbox_id, count)[0]
    finally:
        for sandbox_id in sandboxes.values():
            server.kill(sandbox_id)
    return samples


def report(samples: dict[str, list[float]]) -> None:
    def ms(name: str, q: float) -> float:
        return percentile(samples[name], q / 100) * 1000

    for name, values in samples.items():
        print(f"connect + GET, {name:7} ({len(values)}): p50 {ms(name, 50):.3f} ms, "
              f"p90 {ms(name, 90):.3f} ms")  # fmt: skip
    print(f"the domain proxy adds: p50 {ms('proxied', 50) - ms('direct', 50):+.3f} ms "
          f"({ms('proxied', 50) / ms('direct', 50):.2f}x), "
          f"p90 {ms('proxied', 90) - ms('direct', 90):+.3f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args, template = parse_args(parser)
    with running_fake_internet() as net, scratch("domain-proxy-") as work:
        server = UplinkSandboxd(net, work / "state", template, "--network-pool", POOL,
                                "--dns", DNS_ADDRESS)  # fmt: skip
        try:
            server.start()
            print(f"load average (1 min) at start: {os.getloadavg()[0]:.1f}")
            report(measure(server, args.count, args.rounds))
            print(f"load average (1 min) at end: {os.getloadavg()[0]:.1f}")
        finally:
            server.clean_up()


if __name__ == "__main__":
    main()
