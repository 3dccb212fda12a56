"""What sharing a layer through a registry costs (serve's --registry): a `--mib` MiB layer of
random bytes (nothing to compress or share: one big file and 1 MiB ones) in a layer store,
per round pushed to a real docker-registry on 127.0.0.1 (a repository of the round's own, so
that every byte goes), pushed again (the HEAD that skips it), pulled into an empty store
(downloaded, checked, unpacked), and copied by `cp -a` within the same filesystem: the floor
any move of the layer's files pays. All of it on one disk: the registry's storage, the stores.

Run as root: .venv/bin/python -m bench.layer_registry [--runs 5] [--mib 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import p50_p95_ms, scratch
from sandboxd.host.removal import remove_tree
from sandboxd.images.layer_registry import LayerRegistry
from sandboxd.layers.store import LayerStore
from tests.cluster.registry_server import registry_server, registry_url

if TYPE_CHECKING:
    from pathlib import Path

_MIB = 1 << 20


def make_layer(store: LayerStore, mib: int) -> Path:
    def fill(new: Path) -> None:
        (new / "small").mkdir()
        for i in range(mib // 4):
            (new / f"small/{i}").write_bytes(os.urandom(_MIB))
        with open(new / "big", "wb") as f:
            for _ in range(mib - mib // 4):
                f.write(os.urandom(_MIB))

    path, _ = store.add("step-bench", fill)
    subprocess.run(["sync"], check=True)
    return path


def one_round(host: str, layer: Path, work: Path, n: int, series: dict[str, list[float]]) -> None:
    remote = LayerRegistry(f"http://{host}/bench/round{n}")
    try:
        begin = time.monotonic()
        assert remote.push(layer, LayerStore(layer.parent))
        series["push"].append(time.monotonic() - begin)
        begin = time.monotonic()
        assert not remote.push(layer, LayerStore(layer.parent))
        series["push again (HEAD)"].append(time.monotonic() - begin)
        into = LayerStore(work / f"pulled{n}")
        begin = time.monotonic()
        remote.pull(layer.name, into)
        series["pull"].append(time.monotonic() - begin)
        remove_tree(into.dir)
    finally:
        remote.close()
    copy = work / f"copy{n}"
    begin = time.monotonic()
    subprocess.run(["cp", "-a", "--reflink=never", str(layer), str(copy)], check=True)
    series["cp -a"].append(time.monotonic() - begin)
    remove_tree(copy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=100)
    args = parser.parse_args()
    series: dict[str, list[float]] = {"push": [], "push again (HEAD)": [], "pull": [], "cp -a": []}
    with scratch("bench-layer-registry-") as work, registry_server() as registry:
        layer = make_layer(LayerStore(work / "layers"), args.mib)
        print(f"registry {registry_url(registry)}, a {args.mib} MiB layer, {args.runs} rounds")
        for n in range(args.runs):
            one_round(registry.host, layer, work, n, series)
    for name, samples in series.items():
        rate = args.mib / statistics.median(samples)
        print(f"{name:>18}: {p50_p95_ms(samples)}, {rate:8.1f} MiB/s at p50")


if __name__ == "__main__":
    main()
