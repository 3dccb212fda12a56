"""Volume content against envd's /files, on one `sandboxd serve`, in the same run: B1-style
upload (curl -T, octet-stream, PUT /volumecontent/{id}/file) and B2-style download (curl, GET
.../file) of a hot file, against envd's POST and GET /files in a sandbox of the same serve,
reached through sandboxd's proxy on the same port as the SDKs reach it. Both write to a
loop-mounted ext4 image (the volume's; the sandbox's disk). Rounds alternate the two; each
round's ratio is volume / envd. Target: >= 0.8x both ways.

Run as root: .venv/bin/python -m bench.volume_content [--size-mib 256] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.transfer import MIB, curl_seconds, make_payload
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd
from tests.sandboxd.template_cache import ensure_base_template


def header_args(headers: dict[str, str]) -> list[str]:
    return [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]


def rates(size: int, seconds: float) -> float:
    return size / MIB / seconds


def measure(size: int, runs: int, work: Path) -> dict[str, list[float]]:
    """MiB/s of each variant per round."""
    payload = work / "payload.bin"
    make_payload(str(payload), size)
    found: dict[str, list[float]] = {k: [] for k in ("volume up", "envd up", "volume down",
                                                      "envd down")}  # fmt: skip
    flags = (NO_NETWORK, "--volume-size-mb", str(max(1024, 3 * size // MIB)))
    with running_sandboxd(work / "state", ensure_base_template(), *flags) as server, \
            server.client() as api:  # fmt: skip
        volume = api.post("/volumes", json={"name": "bench"}).json()
        box = api.post("/sandboxes", json={"templateID": "base", "timeout": 3600,
                                           "secure": False}).json()  # fmt: skip
        content = f"{server.url}/volumecontent/{volume['volumeID']}/file?path=/payload.bin"
        bearer = header_args({"Authorization": f"Bearer {volume['token']}"})
        files = f"{server.url}/files?path=/home/user/payload.bin"
        routing = header_args({"E2b-Sandbox-Id": box["sandboxID"], "E2b-Sandbox-Port": "49983"})
        octet = ["-H", "Content-Type: application/octet-stream", "-T", str(payload)]
        for _ in range(runs):
            found["volume up"].append(
                rates(size, curl_seconds(*bearer, *octet, f"{content}&force=true"))
            )
            found["envd up"].append(
                rates(size, curl_seconds(*routing, *octet, "-X", "POST", files))
            )
            found["volume down"].append(rates(size, curl_seconds(*bearer, content)))
            found["envd down"].append(rates(size, curl_seconds(*routing, files)))
        api.delete(f"/sandboxes/{box['sandboxID']}")
        api.delete(f"/volumes/{volume['volumeID']}")
    return found


def report(size: int, found: dict[str, list[float]]) -> None:
    print(f"\nvolume content vs envd /files, {size // MIB} MiB, curl, through sandboxd's port")
    print(
        "| transfer | volume MiB/s median [range] | envd MiB/s median [range] | ratio median "
        "[range] |\n|---|---|---|---|"
    )
    for way in ("up", "down"):
        mine, envd = found[f"volume {way}"], found[f"envd {way}"]
        ratios = [a / b for a, b in zip(mine, envd, strict=True)]
        print(
            f"| {'upload' if way == 'up' else 'download'} | {statistics.median(mine):.0f} "
            f"[{min(mine):.0f}-{max(mine):.0f}] | {statistics.median(envd):.0f} "
            f"[{min(envd):.0f}-{max(envd):.0f}] | {statistics.median(ratios):.2f} "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-volume-") as work:
        report(args.size_mib * MIB, measure(args.size_mib * MIB, args.runs, Path(work)))


if __name__ == "__main__":
    main()
