"""What a full pause costs now that it writes the sandbox's files to disk as well (so that a
crash or reboot leaves it paused to disk instead of gone), through a real `sandboxd serve`: per
round, a sandbox that wrote `--mib` MiB (random bytes, nothing to compress or share) and one
that wrote nothing are each paused (`POST /sandboxes/{id}/pause`, timed), resumed
(`POST /sandboxes/{id}/connect`, timed: the thaw, then the written layer deleted) and killed.

With `--baseline DIR` (a checkout of a commit whose full pause is the freeze alone, e.g.
`git archive main | tar -x -C DIR`), a second serve runs that commit's sandboxd with this
virtualenv and each round measures both: the extra time is this commit's p50 less the
baseline's.

With `--filesystem` the pauses are to disk (`{"memory": false}`: the layer exported, the sandbox
removed) and each resume a boot from the files, to set against the round's cold creates.

Run as root: .venv/bin/python -m bench.full_pause [--runs 10] [--mib 100] [--template DIR]
             [--baseline DIR] [--filesystem]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import p50_p95_ms, parse_args, scratch
from tests.sandboxd.guest_shell import sh
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.sandboxd.test_disk_pause import create

if TYPE_CHECKING:
    import httpx


def server(work: Path, template: Path, tree: Path | None) -> Sandboxd:
    """A serve of this checkout, or of the checkout `tree` (its sandboxd first on the path)."""
    served = Sandboxd(work / ("this" if tree is None else "baseline"), template, NO_NETWORK)
    if tree is not None:
        served.command = [sys.executable, "-P", "-m", "sandboxd"]
        served.env = {"PYTHONPATH": str(tree.absolute())}
    return served


def timed_post(api: httpx.Client, path: str, samples: list[float], **body: object) -> None:
    begin = time.monotonic()
    answer = api.post(path, json=body or None)
    samples.append(time.monotonic() - begin)
    assert answer.is_success, answer.text


def one_round(
    served: Sandboxd, mib: int, series: dict[str, list[float]], memory: bool = True
) -> None:
    """Create (timed: a cold boot, serve has no pool), pause, resume and kill one sandbox that
    wrote `mib` MiB and one that wrote nothing; without `memory`, the pauses are to disk."""
    with served.client() as api:
        for wrote in (mib, 0):
            begin = time.monotonic()
            sandbox = create(api)
            series["cold create"].append(time.monotonic() - begin)
            sid, token = sandbox["sandboxID"], sandbox["envdAccessToken"]
            if wrote:
                script = f"head -c {wrote << 20} /dev/urandom > /home/user/blob && sync"
                sh(served, sid, script, token)
            path = f"/sandboxes/{sid}"
            pause = {} if memory else {"memory": False}
            timed_post(api, path + "/pause", series[f"pause, wrote {wrote} MiB"], **pause)
            timed_post(api, path + "/connect", series[f"resume, wrote {wrote} MiB"], timeout=60)
            assert api.delete(path).status_code == 204


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit")
    parser.add_argument("--filesystem", action="store_true", help="pauses to disk instead")
    args, template = parse_args(parser)
    with scratch("sandboxd-full-pause-") as work, contextlib.ExitStack() as stack:
        trees: dict[str, Path | None] = {"this": None}
        if args.baseline is not None:
            trees["baseline"] = args.baseline
        served = {name: server(work, template, tree) for name, tree in trees.items()}
        for each in served.values():
            stack.callback(each.clean_up)
            each.start()
        names = [f"{step}, wrote {w} MiB" for w in (args.mib, 0) for step in ("pause", "resume")]
        names.append("cold create")
        series: dict[str, dict[str, list[float]]] = {s: {n: [] for n in names} for s in served}
        for _ in range(args.runs):
            for name, each in served.items():
                one_round(each, args.mib, series[name], memory=not args.filesystem)
    for name, measured in series.items():
        print(f"{name}:")
        for step, samples in measured.items():
            print(f"  {step:24} {p50_p95_ms(samples)}")
    if "baseline" in series:
        for step in names:
            extra = statistics.median(series["this"][step]) - statistics.median(
                series["baseline"][step]
            )
            print(f"extra p50, {step:24} {extra * 1000:+7.1f} ms")


if __name__ == "__main__":
    main()
