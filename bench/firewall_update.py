"""nftables rule updates with many sandboxes' chains loaded: `firewall.set_egress` (what
`PUT /sandboxes/{id}/network` and a create's rules cost), p50/p95, with 1000 sandboxes' chains
in the table against with one, in the same run; and `add_sandbox` / `remove_sandbox` (a boot's
and a kill's share) at either size. Target: set_egress p50 <= 50 ms at 1000 chains.

sandboxd.network.firewall itself, in a network namespace the benchmark makes and deletes (the
table, its chains and their interfaces' names exist only there; no interface is made: the map
and chains are keyed by name). Run as root: .venv/bin/python -m bench.firewall_update
[--sandboxes 1000] [--samples 100]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import random
import statistics
import time
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import p50_p95_ms
from sandboxd.network import firewall
from sandboxd.network.slots import IFNAME_PREFIX
from tests.network.namespaces import NetworkNamespace

if TYPE_CHECKING:
    from collections.abc import Callable

POOL = ipaddress.IPv4Network("10.11.0.0/16")
# An update as a user sends one: a few allowed CIDRs, everything else denied; and back.
RULES = [
    firewall.Egress(allow=("198.51.100.10", "203.0.113.0/24", "192.0.2.0/25"),
                    deny=("0.0.0.0/0",)),
    firewall.OPEN,
]  # fmt: skip


def slot(index: int) -> tuple[str, str]:
    """The sandbox's interface name and address, as sandboxd numbers slots."""
    return f"{IFNAME_PREFIX}{index}", str(POOL.network_address + 4 * index + 2)


def timed(samples: list[float], step: Callable[[], None]) -> None:
    begin = time.perf_counter()
    step()
    samples.append(time.perf_counter() - begin)


def updates(loaded: int, samples: int, rules: list[firewall.Egress] = RULES) -> list[float]:
    """set_egress of a random sandbox, alternating between `rules`."""
    out: list[float] = []
    for i in range(samples):
        ifname, address = slot(random.randrange(loaded))  # noqa: S311  (not a secret)
        timed(out, lambda: firewall.set_egress(ifname, address, rules[i % 2]))  # noqa: B023
    return out


def floors(samples: int) -> tuple[list[float], list[float]]:
    """An empty transaction (the nft process and its ruleset cache), and set_egress between
    two rule sets without address sets (no anonymous set to create or destroy)."""
    empty: list[float] = []
    for _ in range(samples):
        timed(empty, lambda: firewall.apply([]))
    return empty, updates(1, samples, [firewall.OPEN, firewall.OPEN])


def churn(loaded: int, samples: int) -> tuple[list[float], list[float]]:
    """A kill and a boot of the last sandbox's slot, `samples` times: (removes, adds)."""
    removes: list[float] = []
    adds: list[float] = []
    ifname, address = slot(loaded - 1)
    for _ in range(samples):
        timed(removes, lambda: firewall.remove_sandbox(ifname))
        timed(adds, lambda: firewall.add_sandbox(ifname, address, RULES[0]))
    return removes, adds


def measure(sandboxes: int, samples: int) -> None:
    firewall.install(POOL)
    firewall.add_sandbox(*slot(0))
    one = updates(1, samples)
    empty_one, plain_one = floors(samples)
    one_remove, one_add = churn(1, samples // 4)
    begin = time.perf_counter()
    for index in range(1, sandboxes):
        firewall.add_sandbox(*slot(index), RULES[index % 2])
    loading = time.perf_counter() - begin
    many = updates(sandboxes, samples)
    empty_many, plain_many = floors(samples)
    many_remove, many_add = churn(sandboxes, samples // 4)

    print(f"load average (1 min): {os.getloadavg()[0]:.1f}")
    print(f"loading {sandboxes - 1} chains one add_sandbox at a time: {loading:.1f} s")
    print(f"set_egress, 1 chain:            {p50_p95_ms(one)}")
    print(f"set_egress, {sandboxes} chains:      {p50_p95_ms(many)}")
    print(f"  p50 ratio {sandboxes} / 1: {statistics.median(many) / statistics.median(one):.2f}")
    print(
        f"empty transaction, 1 / {sandboxes}:    {p50_p95_ms(empty_one)} / {p50_p95_ms(empty_many)}"
    )
    print(f"set_egress without address sets, 1 / {sandboxes}: "
          f"{p50_p95_ms(plain_one)} / {p50_p95_ms(plain_many)}")  # fmt: skip
    print(f"add_sandbox, 1 / {sandboxes} chains:   {p50_p95_ms(one_add)} / {p50_p95_ms(many_add)}")
    print(f"remove_sandbox, 1 / {sandboxes}:       "
          f"{p50_p95_ms(one_remove)} / {p50_p95_ms(many_remove)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()
    ns = NetworkNamespace(f"bench-firewall-{os.getpid()}")
    try:
        ns.call(measure, args.sandboxes, args.samples)
    finally:
        ns.remove()  # the table goes with the namespace


if __name__ == "__main__":
    main()
