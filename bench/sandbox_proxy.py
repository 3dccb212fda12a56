"""The sandbox proxy against direct envd in the same run: Stat p50 (wrk, one keep-alive
connection), B2 download of a 256 MiB hot file (curl) and B4 stdout of `head -c 256M
/dev/zero` through Process/Start (curl, proto). Targets: Stat p50 +<= 1 ms; B2 and B4 >= 0.8x.
Also the proxy's CPU time per Stat request and per MiB relayed in B2 and B4 (this process's,
user and system): on a busy machine steadier figures than latency and throughput. And B2 and B4
through bench.copy_relay, the least work a user-space relay can do (at the proxy's priority),
against direct: the ceiling for any proxy on this machine. And the listener's control API path:
requests per second (wrk, one keep-alive connection) to a minimal ASGI app through sandboxd's
listener, "direct" being the same app served by uvicorn's own httptools protocol; with the
listener's CPU per request.

"Direct" runs the same client inside the sandbox's network namespace (nsenter -n) against
127.0.0.1:49983; "proxied" runs it on the host against the proxy (uvicorn, uvloop, httptools,
in this process, as sandboxd serves it, at sandboxd's priority) with the routing headers. The
clients run at the default priority either way.
Run as root: .venv/bin/python -m bench.sandbox_proxy [--runs 5] [--template DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import uvloop

from envd._gen.process.process_pb import ProcessConfig, StartRequest
from sandboxd.daemon.machinery import SERVE_NICE
from sandboxd.guest.readiness import ENVD_UNIT, envd_ready
from sandboxd.runtime.nspawn.runtime import NspawnRuntime
from sandboxd.runtime.spec import BootImage
from tests.sandboxd.inside import run as run_inside
from tests.sandboxd.proxied import control_api_stand_in, serve_app, serve_proxy

if TYPE_CHECKING:
    from sandboxd.runtime.nspawn.box import NspawnBox

MIB = 1 << 20
SIZE = 256 * MIB
PAYLOAD = "/tmp/bench-payload.bin"
ENVD = "http://127.0.0.1:49983"


async def client(box: NspawnBox | None, *argv: str, stdin: bytes | None = None) -> str:
    """Run a client on the host, or inside the sandbox's network namespace when `box`."""
    prefix = ["nsenter", "-t", str(box.leader_pid), "-n"] if box else []
    proc = await asyncio.create_subprocess_exec(
        *prefix, *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        preexec_fn=default_priority,
    )  # fmt: skip
    out, _ = await proc.communicate(stdin)
    assert proc.returncode == 0, argv
    return out.decode()


def default_priority() -> None:
    """A client's priority (between fork and exec): the default, not the proxy's."""
    os.setpriority(os.PRIO_PROCESS, 0, 0)


def header_args(headers: dict[str, str]) -> list[str]:
    return [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]


async def wrk(box: NspawnBox | None, url: str, headers: dict[str, str], *extra: str,
              cpu: list[float] | None = None) -> str:  # fmt: skip
    """wrk's report (one connection, 3 s); appends this process's CPU µs per request to `cpu`
    when given."""
    start = time.process_time()
    out = await client(box, "wrk", "-t1", "-c1", "-d3s", *extra, *header_args(headers), url)
    if cpu is not None:
        requests = re.search(r"^\s+(\d+) requests in", out, re.MULTILINE)
        assert requests, out
        cpu.append((time.process_time() - start) * 1e6 / int(requests.group(1)))
    return out


async def stat_p50_ms(box: NspawnBox | None, url: str, headers: dict[str, str], lua: Path,
                      cpu: list[float] | None = None) -> float:  # fmt: skip
    """wrk's p50; appends this process's CPU µs per request to `cpu` when given."""
    out = await wrk(box, url, headers, "--latency", "-s", str(lua), cpu=cpu)
    match = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)$", out, re.MULTILINE)
    assert match, out
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]
    return float(match.group(1)) * scale


async def requests_per_s(url: str, cpu: list[float] | None = None) -> float:
    """wrk's rate of GET `url` from the host."""
    out = await wrk(None, url, {}, cpu=cpu)
    match = re.search(r"^Requests/sec:\s+([\d.]+)$", out, re.MULTILINE)
    assert match, out
    return float(match.group(1))


async def curl_mib_s(box: NspawnBox | None, url: str, headers: dict[str, str], *extra: str,
                     stdin: bytes | None = None) -> float:  # fmt: skip
    out = await client(box, "curl", "-sS", "-o", "/dev/null", "-w",
                       "%{size_download} %{time_total}", *header_args(headers), *extra, url,
                       stdin=stdin)  # fmt: skip
    size, seconds = out.split()
    assert int(size) >= SIZE, out
    return SIZE / MIB / float(seconds)


async def proxied_mib_s(cpu: list[float], url: str, headers: dict[str, str], *extra: str,
                        stdin: bytes | None = None) -> float:  # fmt: skip
    """curl_mib_s through the proxy; appends the proxy's CPU ms per MiB to `cpu`."""
    start = time.process_time()
    mib_s = await curl_mib_s(None, url, headers, *extra, stdin=stdin)
    cpu.append((time.process_time() - start) * 1000 / (SIZE / MIB))
    return mib_s


async def copy_relay_mib_s(box: NspawnBox, path: str, headers: dict[str, str], *extra: str,
                           stdin: bytes | None = None) -> float:  # fmt: skip
    """curl_mib_s through bench.copy_relay, over a new connection to envd in the sandbox."""
    upstream = await box.dialer.connect(49983)
    listener = socket.create_server(("127.0.0.1", 0))
    with upstream, listener:
        fds = (listener.fileno(), upstream.fileno())
        relay = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.copy_relay", *map(str, fds), pass_fds=fds
        )
        url = f"http://127.0.0.1:{listener.getsockname()[1]}{path}"
    try:
        return await curl_mib_s(None, url, headers, *extra, stdin=stdin)
    finally:
        with contextlib.suppress(ProcessLookupError):
            relay.kill()  # normally gone already: the client closed its connection
        await relay.wait()


def stdout_request() -> bytes:
    body = StartRequest(process=ProcessConfig(cmd="head", args=["-c", str(SIZE), "/dev/zero"]))
    payload = body.to_binary()
    return b"\0" + struct.pack(">I", len(payload)) + payload


async def control_rows(proxy_url: str, plain_url: str) -> dict[str, tuple[float, float]]:
    """The control API's stand-in through the listener, against `plain_url`: the same app
    served by uvicorn's own protocol."""
    cpu: list[float] = []
    rate = (await requests_per_s(plain_url + "/"), await requests_per_s(proxy_url + "/", cpu))
    return {"control API (req/s)": rate, "proxy CPU, control (us/req)": (0.0, cpu[0])}


async def one_round(box: NspawnBox, proxy_url: str, plain_url: str,
                    lua: Path) -> dict[str, tuple[float, float]]:  # fmt: skip
    routed = {"E2b-Sandbox-Id": box.id, "E2b-Sandbox-Port": "49983"}
    stat = "/filesystem.Filesystem/Stat"
    download = f"/files?path={PAYLOAD}&username=root"
    start = "/process.Process/Start"
    proto = {"Content-Type": "application/connect+proto"}
    stat_cpu: list[float] = []
    b2_cpu: list[float] = []
    b4_cpu: list[float] = []
    rows = {
        "Stat p50 (ms)": (
            await stat_p50_ms(box, ENVD + stat, {}, lua),
            await stat_p50_ms(None, proxy_url + stat, routed, lua, stat_cpu),
        ),
        "B2 download (MiB/s)": (
            await curl_mib_s(box, ENVD + download, {}),
            await proxied_mib_s(b2_cpu, proxy_url + download, routed),
        ),
        "B4 stdout, proto (MiB/s)": (
            await curl_mib_s(box, ENVD + start, proto, "--data-binary", "@-",
                             stdin=stdout_request()),
            await proxied_mib_s(b4_cpu, proxy_url + start, {**proto, **routed},
                                "--data-binary", "@-", stdin=stdout_request()),
        ),
    }  # fmt: skip
    rows["B2 via copy relay (MiB/s)"] = (
        rows["B2 download (MiB/s)"][0],
        await copy_relay_mib_s(box, download, {}),
    )
    rows["B4 via copy relay (MiB/s)"] = (
        rows["B4 stdout, proto (MiB/s)"][0],
        await copy_relay_mib_s(box, start, proto, "--data-binary", "@-", stdin=stdout_request()),
    )
    rows.update(await control_rows(proxy_url, plain_url))
    rows["proxy CPU, Stat (us/req)"] = (0.0, stat_cpu[0])
    rows["proxy CPU, B2 (ms/MiB)"] = (0.0, b2_cpu[0])
    rows["proxy CPU, B4 (ms/MiB)"] = (0.0, b4_cpu[0])
    return rows


async def bench(template: Path, runs: int, work: Path) -> None:
    lua = work / "stat.lua"
    body = json.dumps({"path": "/etc/hostname"})
    lua.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = {json.dumps(body)}\n"
    )
    runtime = NspawnRuntime(
        work / "sandboxes",
        cgroup_parent=f"sandboxd-bench-{uuid.uuid4().hex[:6]}",
        probe=envd_ready,
        guest_unit=ENVD_UNIT,
    )
    box = await runtime.boot(uuid.uuid4().hex[:16], BootImage((template,)))
    os.setpriority(os.PRIO_PROCESS, 0, SERVE_NICE)  # this thread's: the proxy's event loop
    try:
        run_inside(box, f"head -c {SIZE} /dev/urandom > {PAYLOAD}")
        async with serve_proxy() as served, serve_app(control_api_stand_in, "httptools") as plain:
            served.lookup.running[box.id] = box
            rounds = [await one_round(box, served.url, plain, lua) for _ in range(runs)]
    finally:
        await runtime.kill(box)
        for mount in {runtime.host.unified, *runtime.host.v1.values()}:
            with contextlib.suppress(FileNotFoundError):
                (mount / runtime.cgroup_parent).rmdir()
    print(f"{'median of ' + str(runs) + ' rounds':28} {'direct':>9} {'proxied':>9} {'ratio':>7}")
    for name in rounds[0]:
        direct = statistics.median(r[name][0] for r in rounds)
        proxied = statistics.median(r[name][1] for r in rounds)
        if name.startswith("proxy CPU"):
            print(f"{name:28} {'':>9} {proxied:9.2f}")
            continue
        if name.startswith("Stat"):
            ratio = f"+{proxied - direct:.2f}ms"
        else:
            ratio = f"{statistics.median(r[name][1] / r[name][0] for r in rounds):.2f}"
        print(f"{name:28} {direct:9.2f} {proxied:9.2f} {ratio:>7}")
    for kind in ("B2", "B4"):
        proxied_row = next(
            name for name in rounds[0] if name.startswith(f"{kind} ") and "relay" not in name
        )
        relay_row = f"{kind} via copy relay (MiB/s)"
        share = statistics.median(r[proxied_row][1] / r[relay_row][1] for r in rounds)
        print(f"{kind} proxied / copy relay: {share:.2f} (copy relay rows: relayed in 'proxied')")
    for name in rounds[0]:
        print(f"  {name}, per round: " + "; ".join(f"{r[name][0]:.2f} / {r[name][1]:.2f}"
                                                  for r in rounds))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--template", type=Path, help="a base template root filesystem")
    args = parser.parse_args()
    if args.template is None:
        from tests.sandboxd.template_cache import ensure_base_template

        args.template = ensure_base_template()
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as work:
        uvloop.run(bench(args.template, args.runs, Path(work)))


if __name__ == "__main__":
    main()
