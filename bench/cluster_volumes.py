"""The volume-content API through a gateway against the same requests sent to the volume's node
directly (its internal API runs the same endpoints, without the relay), in one run on the
cluster rig (tests/cluster/rig.py, one node, one gateway): upload (curl -T, octet-stream, PUT
.../file) and download (curl, GET .../file) of a file, and a stat (GET .../path) over a kept-alive
connection, rounds alternating the two ways. What the relay costs: the ratio of rates, the
difference of stat latencies.

Run as root: .venv/bin/python -m bench.cluster_volumes [--size-mib 256] [--runs 5] [--stats 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.transfer import MIB, curl_seconds, make_payload
from bench.volume_content import header_args, rates
from tests.cluster.rig import running_cluster


def stat_ms(url: str, headers: dict[str, str], count: int) -> list[float]:
    """Each of `count` stats of the volume's root, in ms, over one kept-alive connection."""
    took = []
    with httpx.Client(headers=headers, timeout=60) as client:
        client.get(url).raise_for_status()  # the connection made
        for _ in range(count):
            start = time.perf_counter()
            client.get(url).raise_for_status()
            took.append((time.perf_counter() - start) * 1000)
    return took


def measure(size: int, runs: int, stats: int, work: Path) -> dict[str, list[float]]:
    payload = work / "payload.bin"
    make_payload(str(payload), size)
    found: dict[str, list[float]] = {f"{way} {kind}": [] for way in ("gateway", "node")
                                     for kind in ("up", "down", "stat")}  # fmt: skip
    with running_cluster(work, nodes=1, gateways=1) as cluster:
        gateway, node = cluster.gateways[0], cluster.nodes[0]
        with gateway.client() as api:
            volume = api.post("/volumes", json={"name": "bench", "sizeMB": 3 * size // MIB}).json()
        ways = {
            "gateway": (f"{gateway.url}/volumecontent/{volume['volumeID']}",
                        {"Authorization": f"Bearer {volume['token']}"}),
            "node": (f"{node.url}/node/v1/volumecontent/{volume['volumeID']}", node.headers),
        }  # fmt: skip
        octet = ["-H", "Content-Type: application/octet-stream", "-T", str(payload)]
        for _ in range(runs):
            for way, (base, headers) in ways.items():
                file = f"{base}/file?path=/payload.bin"
                up = curl_seconds(*header_args(headers), *octet, f"{file}&force=true")
                found[f"{way} up"].append(rates(size, up))
                found[f"{way} down"].append(rates(size, curl_seconds(*header_args(headers), file)))
                found[f"{way} stat"] += stat_ms(f"{base}/path?path=/", headers, stats // runs)
        with gateway.client() as api:
            api.delete(f"/volumes/{volume['volumeID']}")
    return found


def report(size: int, found: dict[str, list[float]]) -> None:
    print(f"\nvolume content through a gateway vs at its node, {size // MIB} MiB, curl")
    print("| measure | through the gateway | at the node | gateway / node |\n|---|---|---|---|")
    for kind, label in (("up", "upload MiB/s"), ("down", "download MiB/s")):
        mine, node = found[f"gateway {kind}"], found[f"node {kind}"]
        ratios = [a / b for a, b in zip(mine, node, strict=True)]
        print(f"| {label} | {statistics.median(mine):.0f} [{min(mine):.0f}-{max(mine):.0f}] | "
              f"{statistics.median(node):.0f} [{min(node):.0f}-{max(node):.0f}] | "
              f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")  # fmt: skip
    mine, node = found["gateway stat"], found["node stat"]
    p50, n50 = statistics.median(mine), statistics.median(node)
    print(f"| stat p50 ms | {p50:.2f} | {n50:.2f} | +{p50 - n50:.2f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stats", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-volumes-") as work:
        size = args.size_mib * MIB
        report(size, measure(size, args.runs, args.stats, Path(work)))


if __name__ == "__main__":
    main()
