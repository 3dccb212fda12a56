"""Snapshots through a real `sandboxd serve`: how long a sandbox that wrote 10 MiB is frozen
while it is snapshotted (target <= 100 ms), the snapshot call's latency, and a create from the
snapshot against a cold create of its template, `base` (target <= 1.1x), interleaved round by
round (which goes first alternates) on one server without a warm pool.

The freeze is what the sandbox itself sees: a probe inside it sleeps 1 ms at a time and writes
down every gap of its monotonic clock over 2 ms with the wall-clock time it ended; the freeze is
the longest gap that ended during the snapshot call (a gap the machine's load alone makes shows
up outside the call too: the probe's largest gap before it is reported beside it). Creates are `POST /v2/sandboxes` (answered once envd took its /init), over plain HTTP.

Run as root: .venv/bin/python -m bench.sandboxd_snapshots [--runs 10] [--template DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from bench.sandboxd_lifecycle import p50_p95_ms, parse_args, scratch
from tests.sandboxd.guest_shell import background, sh
from tests.sandboxd.serving import NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    import httpx

WRITTEN = "head -c 10485760 /dev/urandom > /home/user/written && sync"
GAPS = "/tmp/gaps"  # inside the sandbox
PROBE = f"""python3 -c '
import time
open("{GAPS}", "w").close()  # running: the bench waits for this before it snapshots
last = time.monotonic()
while True:
    time.sleep(0.001)
    now = time.monotonic()
    if now - last > 0.002:
        with open("{GAPS}", "a") as f:
            f.write(f"{{time.time()}} {{now - last}}\\n")
    last = now
'"""


@dataclass
class Series:
    """Seconds per sample."""

    freeze: list[float] = field(default_factory=list)
    other_gap: list[float] = field(default_factory=list)
    snapshot: list[float] = field(default_factory=list)
    from_snapshot: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)  # per round: from_snapshot / cold


def create(api: httpx.Client, template: str) -> tuple[dict[str, str], float]:
    begin = time.monotonic()
    answer = api.post("/v2/sandboxes", json={"templateID": template, "timeout": 300})
    took = time.monotonic() - begin
    assert answer.status_code == 201, answer.text
    return dict(answer.json()), took


def gaps(server: Sandboxd, sandbox: dict[str, str]) -> list[tuple[float, float]]:
    """(wall-clock end, seconds) of each gap the probe wrote down."""
    text = sh(server, sandbox["sandboxID"], f"cat {GAPS}", sandbox["envdAccessToken"])
    return [(float(a), float(b)) for a, b in (line.split() for line in text.splitlines())]


def one_round(server: Sandboxd, api: httpx.Client, series: Series, cold_first: bool) -> None:
    source, _ = create(api, "base")
    sid, token = source["sandboxID"], source["envdAccessToken"]
    sh(server, sid, WRITTEN, token)
    background(server, sid, PROBE, token)
    sh(server, sid, f"until [ -e {GAPS} ]; do sleep 0.01; done", token)
    began = time.time()
    taken = api.post(f"/sandboxes/{sid}/snapshots", json={})
    series.snapshot.append(time.time() - began)
    ended = time.time()
    assert taken.status_code == 201, taken.text
    snapshot_id = taken.json()["snapshotID"]
    found = gaps(server, source)
    during = [g for end, g in found if began <= end <= ended + 0.05]
    series.freeze.append(max(during, default=0.0))
    series.other_gap.append(max((g for end, g in found if end < began), default=0.0))
    made = []
    for template in ("base", snapshot_id) if cold_first else (snapshot_id, "base"):
        sandbox, took = create(api, template)
        made.append(sandbox["sandboxID"])
        (series.cold if template == "base" else series.from_snapshot).append(took)
    series.ratio.append(series.from_snapshot[-1] / series.cold[-1])
    for sandbox_id in (*made, sid):
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    assert api.delete(f"/templates/{quote(snapshot_id, safe='')}").status_code == 204


def report(series: Series) -> None:
    print(f"freeze, seen inside (10 MiB written): {p50_p95_ms(series.freeze)}")
    print(f"  the probe's largest other gap:      {p50_p95_ms(series.other_gap)}")
    print(f"snapshot call:                        {p50_p95_ms(series.snapshot)}")
    print(f"create from the snapshot:             {p50_p95_ms(series.from_snapshot)}")
    print(f"cold create of base:                  {p50_p95_ms(series.cold)}")
    p50s = statistics.median(series.from_snapshot) / statistics.median(series.cold)
    print(f"from snapshot / cold: p50s {p50s:.3f}x, per-round median "
          f"{statistics.median(series.ratio):.3f}x [{min(series.ratio):.3f}-"
          f"{max(series.ratio):.3f}]")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args, template = parse_args(parser)
    with scratch("sandboxd-snapshots-") as work, contextlib.ExitStack() as stack:
        server = Sandboxd(work / "state", template, NO_NETWORK)
        stack.callback(server.clean_up)
        server.start()
        load_before = os.getloadavg()[0]
        series = Series()
        with server.client() as api:
            create(api, "base")  # untimed: the first create pays for first-use costs
            for run in range(args.runs):
                one_round(server, api, series, cold_first=run % 2 == 0)
        load_after = os.getloadavg()[0]
    print(f"load average (1 min) at start / end: {load_before:.1f} / {load_after:.1f}")
    report(series)


if __name__ == "__main__":
    main()
