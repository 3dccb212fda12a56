"""A fork against cold creates, through a real `sandboxd serve` without a warm pool: `POST
/sandboxes/{id}/fork {"count": 5}` until its 201 (one capture of the parent, five children
booted and /init-ed) against three `POST /sandboxes` one after the other (each until its 201:
booted and /init-ed); target: the fork within the three creates' time. A fork of one child
against one create shows what a fork adds to a boot (the capture). Round by round, the creates
first, everything made killed after each; the parent has written `--parent-mib` MiB.

Run as root: .venv/bin/python -m bench.sandboxd_fork [--runs 10] [--parent-mib 10] [--template DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import p50_p95_ms, parse_args, scratch
from tests.sandboxd.guest_shell import sh
from tests.sandboxd.serving import NO_NETWORK, Sandboxd

if TYPE_CHECKING:
    import httpx

FORK_COUNT = 5
CREATES = 3
BODY = {"templateID": "base", "secure": True, "timeout": 600}


def created(api: httpx.Client) -> str:
    answer = api.post("/sandboxes", json=BODY)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["sandboxID"])


def creates_s(api: httpx.Client, count: int) -> float:
    """Seconds for `count` creates one after the other (killed afterwards, untimed)."""
    begin = time.monotonic()
    made = [created(api) for _ in range(count)]
    took = time.monotonic() - begin
    for sandbox_id in made:
        assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
    return took


def fork_s(api: httpx.Client, parent: str, count: int) -> float:
    """Seconds for one fork of `count` children (killed afterwards, untimed)."""
    begin = time.monotonic()
    answer = api.post(f"/sandboxes/{parent}/fork", json={"count": count, "timeout": 600})
    took = time.monotonic() - begin
    assert answer.status_code == 201, answer.text
    for entry in answer.json():
        assert "sandbox" in entry, entry
        assert api.delete(f"/sandboxes/{entry['sandbox']['sandboxID']}").status_code == 204
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--parent-mib", type=int, default=10)
    args, template = parse_args(parser)
    with scratch("sandboxd-fork-") as work:
        server = Sandboxd(work / "state", template, NO_NETWORK)
        try:
            server.start()
            with server.client() as api:
                answer = api.post("/sandboxes", json=BODY)
                assert answer.status_code == 201, answer.text
                parent, token = answer.json()["sandboxID"], answer.json()["envdAccessToken"]
                write = f"head -c {args.parent_mib}M /dev/urandom > /home/user/written"
                sh(server, parent, write, token)
                creates_s(api, CREATES)  # untimed: the first boots warm the host's caches
                load_before = os.getloadavg()[0]
                creates, forks, create, fork = [], [], [], []
                for _ in range(args.runs):
                    creates.append(creates_s(api, CREATES))
                    forks.append(fork_s(api, parent, FORK_COUNT))
                    create.append(creates_s(api, 1))
                    fork.append(fork_s(api, parent, 1))
                load_after = os.getloadavg()[0]
        finally:
            server.clean_up()
    print(f"load average (1 min) at start / end: {load_before:.1f} / {load_after:.1f}")
    print(f"{CREATES} cold creates, one after another: {p50_p95_ms(creates)}")
    print(f"fork, count {FORK_COUNT}:                  {p50_p95_ms(forks)}")
    print(f"1 cold create:                       {p50_p95_ms(create)}")
    print(f"fork, count 1:                       {p50_p95_ms(fork)}")
    ratio = statistics.median(forks) / statistics.median(creates)
    print(f"fork p50 over the creates' p50: {ratio:.2f}x (target <= 1)")


if __name__ == "__main__":
    main()
