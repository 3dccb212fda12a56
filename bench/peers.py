"""envd against the tools a user would otherwise pick, side by side in one run: its own OpenSSH
server (bench.peer_sshd), its own Jupyter Server (bench.peer_jupyter) and its own envd, every
variant measured once per round, interleaved (the order flips every other round), and the
ratios given per round: peer time / envd time, so above 1 means envd is faster.

- 1 GiB upload and download: envd with curl; sftp and scp (SFTP protocol, as scp is since
  OpenSSH 9) with the default cipher (chacha20-poly1305) and with aes128-gcm.
- 1000 x 4 KiB uploads: `sftp -b` batch against envd over one kept-alive httpx client, the
  e2b SDK's `files.write` loop and its `write_files` batch (bench.sdk_worker).
- `echo x` round trip: a fresh `ssh`, an `ssh` through a ControlMaster, against the SDK's
  `commands.run` (`bash -l -c`) and a raw Connect client over one kept-alive connection.
- 64 MiB upload: Jupyter's contents API (base64 JSON, whole and in JupyterLab's 1 MiB chunks)
  against envd with the same httpx client.

Both sides act as one unprivileged login user (bench.peer_sshd), envd's default user set to it
through /init. CPU of each server (its cgroup, everything it forks included: bench.peer_procs)
and of the client is given per GiB or per operation. Payloads and destinations live on tmpfs (/dev/shm), keys, configs,
logs and the Jupyter virtualenv in a temp dir; all of it and every process go away afterwards.
Needs curl, openssh-server and openssh-client (apt), the SDK virtualenv (tests/sdk/.venv, built
as scripts/test-sdk builds it) and PyPI for Jupyter Server. Not a test: not in .ci/run.
Run: .venv/bin/python -m bench.peers [--rounds 3 | --quick] [--jupyter-venv DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import getpass
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench.peer_jupyter import JupyterServer, venv_home
from bench.peer_procs import CpuCgroups, ServerProcess
from bench.peer_sshd import FAST_CIPHER, HOST, ControlMaster, SshServer
from bench.process_start import RawStart
from bench.sdk_process import SDK_PYTHON, require_sdk_python
from envd._gen.process.process_pb import ProcessConfig, StartRequest
from tests.envd_process import TRACEBACK_MARKER, start_envd

if TYPE_CHECKING:
    from collections.abc import Callable

MIB = 1024 * 1024
GIB = 1024 * MIB
REPO = Path(__file__).resolve().parents[1]
SMALL_COUNT, SMALL_SIZE = 1000, 4096
JUPYTER_SIZE = 64 * MIB
FRESH_SSH_CALLS, KEPT_CALLS = 20, 50
OCTET = {"Content-Type": "application/octet-stream"}


@dataclass
class Timing:
    """What a client measured itself: wall seconds (per call for the round trips) and its own
    CPU over the whole run."""

    seconds: float
    client_cpu: float


@dataclass
class Result:
    seconds: float
    server_cpu: float
    client_cpu: float


@dataclass
class Variant:
    name: str
    server: ServerProcess
    run: Callable[[], Timing | None]
    is_envd: bool
    calls: int = 1  # operations per run, for the per-file and per-call figures
    results: list[Result] = field(default_factory=list)

    def median(self, pick: Callable[[Result], float]) -> float:
        return statistics.median(pick(r) for r in self.results)


@dataclass
class Group:
    """Variants that do the same work: `size` bytes per run (given in MiB/s and CPU per GiB),
    else `calls` operations per run (ms and CPU ms per operation)."""

    title: str
    variants: list[Variant]
    size: int = 0
    unit: str = "file"


class EnvdServer(ServerProcess):
    """envd on a free port, its default user set through /init as E2B's orchestrator does."""

    def __init__(self, log_dir: Path, default_user: str) -> None:
        self.daemon = start_envd(log_dir)
        super().__init__("envd", self.daemon.proc)
        self.url = self.daemon.url
        self.port = self.daemon.port
        httpx.post(f"{self.url}/init", json={"defaultUser": default_user}).raise_for_status()


def client_cpu() -> float:
    """CPU of this process and of the client processes it has waited for, so far."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(variant: Variant) -> Result:
    """Run one variant once: wall time, the server's CPU and the client's (unless the client
    timed itself)."""
    server_before = variant.server.cpu_seconds()
    client_before = client_cpu()
    started = time.perf_counter()
    timing = variant.run()
    seconds = time.perf_counter() - started
    client_spent = client_cpu() - client_before
    server_cpu = variant.server.cpu_seconds() - server_before
    if timing is not None:
        return Result(timing.seconds, server_cpu, timing.client_cpu)
    return Result(seconds, server_cpu, client_spent)


def run_quiet(command: list[str], stdin: bytes | None = None) -> None:
    subprocess.run(command, input=stdin, check=True, stdout=subprocess.DEVNULL)


def expect_size(path: Path, size: int) -> None:
    actual = path.stat().st_size
    if actual != size:
        sys.exit(f"{path} has {actual} bytes, expected {size}")


def sdk_worker(*args: str | int) -> Timing:
    out = subprocess.run(
        [str(SDK_PYTHON), str(REPO / "bench" / "sdk_worker.py"), *map(str, args)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report = json.loads(out)
    samples = report["samples"]
    seconds = statistics.median(samples) if samples else report["seconds"]
    return Timing(seconds, report["cpu"])


def median_call(calls: int, call: Callable[[], object]) -> Timing:
    """The median of `calls` timed calls, and the client's CPU over all of them."""
    samples = []
    cpu = client_cpu()
    for _ in range(calls):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return Timing(statistics.median(samples), client_cpu() - cpu)


class Bench:
    """The servers and the scratch space of one run, and every variant to measure."""

    def __init__(
        self, work: Path, envd: EnvdServer, ssh: SshServer, jupyter: JupyterServer, size: int
    ) -> None:
        self.size = size
        self.envd, self.ssh, self.jupyter = envd, ssh, jupyter
        self.payload = work / "payload.bin"
        # Uploads land here, written by the login user on either side.
        drop = work / "drop"
        drop.mkdir()
        drop.chmod(0o777)
        self.target = drop / "target.bin"
        self.small = work / "small.bin"
        self.small.write_bytes(os.urandom(SMALL_SIZE))
        self.small_dir = drop / "small"
        self.http = httpx.Client(base_url=envd.url, timeout=600)
        # Kept connections for the round trips, opened once and warmed up, as a user keeps them.
        self.master = ControlMaster(ssh)
        run_quiet(self.master.command("echo x"))
        ssh.keep_current_processes()
        request = StartRequest(
            process=ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "echo x"]), stdin=False
        )
        self.raw = RawStart(envd.port, request)
        self.raw_echo()
        self.jupyter_data = os.urandom(JUPYTER_SIZE)
        with open(self.payload, "wb") as f:
            block = os.urandom(MIB)
            f.writelines(block for _ in range(size // MIB))

    def close(self) -> None:
        self.http.close()
        self.raw.close()
        self.master.stop()

    # 1 GiB transfers

    def _transfer(self, command: list[str], stdin: bytes | None = None) -> None:
        """Run one client command that writes the whole payload to the target; check it."""
        run_quiet(command, stdin)
        expect_size(self.target, self.size)
        self.target.unlink()

    def envd_upload(self) -> None:
        self._transfer([
            "curl", "-sS", "--fail", "-o", "/dev/null", "-X", "POST",
            "-H", "Content-Type: application/octet-stream", "-T", str(self.payload),
            f"{self.envd.url}/files?path={self.target}",
        ])  # fmt: skip

    def envd_download(self) -> None:
        self._transfer([
            "curl", "-sS", "--fail", "-o", str(self.target),
            f"{self.envd.url}/files?path={self.payload}",
        ])  # fmt: skip

    def _ssh_transfer(self, name: str, command: list[str], stdin: bytes | None = None) -> Variant:
        return Variant(name, self.ssh, functools.partial(self._transfer, command, stdin), False)

    def transfer_groups(self) -> list[Group]:
        up = [Variant("envd, curl", self.envd, self.envd_upload, True)]
        down = [Variant("envd, curl", self.envd, self.envd_download, True)]
        put = f"put {self.payload} {self.target}\n".encode()
        get = f"get {self.payload} {self.target}\n".encode()
        payload, target = str(self.payload), str(self.target)
        for cipher, label in ((None, "default cipher"), (FAST_CIPHER, "aes128-gcm")):
            sftp = self.ssh.command("sftp", "-q", "-b", "-", HOST, cipher=cipher)
            scp = functools.partial(self.ssh.command, "scp", "-q", cipher=cipher)
            up += [
                self._ssh_transfer(f"sftp, {label}", sftp, put),
                self._ssh_transfer(f"scp, {label}", scp(payload, f"{HOST}:{target}")),
            ]
            down += [
                self._ssh_transfer(f"sftp, {label}", sftp, get),
                self._ssh_transfer(f"scp, {label}", scp(f"{HOST}:{payload}", target)),
            ]
        mib = self.size // MIB
        return [
            Group(f"{mib} MiB upload", up, size=self.size),
            Group(f"{mib} MiB download", down, size=self.size),
        ]

    # 1000 x 4 KiB

    def _fresh_small_dir(self) -> str:
        if self.small_dir.exists():
            shutil.rmtree(self.small_dir)
        self.small_dir.mkdir()
        self.small_dir.chmod(0o777)
        return str(self.small_dir)

    def _check_small(self, expected: int) -> None:
        count = len(os.listdir(self.small_dir))
        if count < expected:
            sys.exit(f"{self.small_dir} has {count} files, expected {expected}")

    def sftp_batch(self) -> None:
        directory = self._fresh_small_dir()
        batch = "".join(f"put {self.small} {directory}/sftp-{i}\n" for i in range(SMALL_COUNT))
        run_quiet(self.ssh.command("sftp", "-q", "-b", "-", HOST), batch.encode())
        self._check_small(SMALL_COUNT)

    def httpx_loop(self) -> None:
        directory = self._fresh_small_dir()
        data = self.small.read_bytes()
        self.http.post(f"/files?path={directory}/warm-up", content=data, headers=OCTET)
        for i in range(SMALL_COUNT):
            self.http.post(
                f"/files?path={directory}/httpx-{i}", content=data, headers=OCTET
            ).raise_for_status()
        self._check_small(SMALL_COUNT)

    def sdk_writes(self, operation: str) -> Timing:
        directory = self._fresh_small_dir()
        timing = sdk_worker(operation, self.envd.url, directory, SMALL_COUNT, SMALL_SIZE)
        self._check_small(SMALL_COUNT)
        return timing

    def small_group(self) -> Group:
        return Group(
            f"{SMALL_COUNT} x 4 KiB upload",
            [
                Variant("sftp -b batch", self.ssh, self.sftp_batch, False, SMALL_COUNT),
                Variant(
                    "envd, httpx keep-alive loop", self.envd, self.httpx_loop, True, SMALL_COUNT
                ),
                Variant(
                    "envd, SDK files.write loop",
                    self.envd,
                    lambda: self.sdk_writes("write_loop"),
                    True,
                    SMALL_COUNT,
                ),
                Variant(
                    "envd, SDK write_files batch",
                    self.envd,
                    lambda: self.sdk_writes("write_files"),
                    True,
                    SMALL_COUNT,
                ),
            ],
        )

    # echo x

    def fresh_ssh(self) -> Timing:
        command = self.ssh.command("ssh", HOST, "echo x")
        return median_call(FRESH_SSH_CALLS, lambda: run_quiet(command))

    def raw_echo(self) -> None:
        """One Start over the kept connection, to the end of its stream; it must print x."""
        if not self.raw.first_data():
            sys.exit("envd's Start of echo x sent no `x`")

    def echo_group(self) -> Group:
        kept = self.master.command("echo x")
        return Group(
            "`echo x` round trip",
            [
                Variant("ssh, fresh connection", self.ssh, self.fresh_ssh, False, FRESH_SSH_CALLS),
                Variant(
                    "ssh, ControlMaster",
                    self.ssh,
                    lambda: median_call(KEPT_CALLS, lambda: run_quiet(kept)),
                    False,
                    KEPT_CALLS,
                ),
                Variant(
                    "envd, SDK commands.run",
                    self.envd,
                    lambda: sdk_worker("run", self.envd.url, KEPT_CALLS),
                    True,
                    KEPT_CALLS,
                ),
                Variant(
                    "envd, raw Connect client",
                    self.envd,
                    lambda: median_call(KEPT_CALLS, self.raw_echo),
                    True,
                    KEPT_CALLS,
                ),
            ],
            unit="call",
        )

    # 64 MiB vs Jupyter

    def envd_64(self) -> None:
        path = self.target.with_name("envd-64.bin")
        self.http.post(
            f"/files?path={path}", content=self.jupyter_data, headers=OCTET
        ).raise_for_status()
        expect_size(path, JUPYTER_SIZE)
        path.unlink()

    def jupyter_64(self, chunk: int | None) -> None:
        self.jupyter.upload("jupyter-64.bin", self.jupyter_data, chunk)
        path = self.jupyter.root_dir / "jupyter-64.bin"
        expect_size(path, JUPYTER_SIZE)
        path.unlink()

    def jupyter_group(self) -> Group:
        return Group(
            "64 MiB upload, Jupyter contents API",
            [
                Variant("envd, httpx octet-stream", self.envd, self.envd_64, True),
                Variant(
                    "Jupyter, one PUT (base64 JSON)",
                    self.jupyter,
                    lambda: self.jupyter_64(None),
                    False,
                ),
                Variant(
                    "Jupyter, 1 MiB chunks (JupyterLab)",
                    self.jupyter,
                    lambda: self.jupyter_64(MIB),
                    False,
                ),
            ],
            size=JUPYTER_SIZE,
        )


def run_rounds(groups: list[Group], rounds: int) -> None:
    for number in range(rounds):
        started = time.monotonic()
        for group in groups:
            order = group.variants if number % 2 == 0 else group.variants[::-1]
            for variant in order:
                variant.results.append(measure(variant))
        print(f"round {number + 1}/{rounds}: {time.monotonic() - started:.0f} s", file=sys.stderr)


def variant_row(group: Group, v: Variant) -> str:
    """Speed, server CPU and client CPU: per GiB for transfers, else per file or call."""
    if group.size:
        speed = f"{group.size / MIB / v.median(lambda r: r.seconds):.0f}"
        scale = GIB / group.size
    else:
        per_run = v.median(lambda r: r.seconds)  # round trips: already the median call
        speed = f"{per_run * 1000 / (v.calls if group.unit == 'file' else 1):.2f}"
        scale = 1000 / v.calls
    server, client = v.median(lambda r: r.server_cpu), v.median(lambda r: r.client_cpu)
    return f"| {v.name} | {speed} | {server * scale:.2f} | {client * scale:.2f} |"


def report(groups: list[Group], rounds: int) -> None:
    for group in groups:
        print(f"\n{group.title}, median of {rounds} round(s)")
        if group.size:
            columns = "MiB/s | server CPU s/GiB | client CPU s/GiB"
        else:
            columns = f"ms per {group.unit} | server CPU ms per {group.unit} | client CPU ms per {group.unit}"
        print(f"| variant | {columns} |\n|---|---|---|---|")
        for v in group.variants:
            print(variant_row(group, v))
        print("\n| envd vs peer | peer time / envd time, per round | median |\n|---|---|---|")
        for envd in (v for v in group.variants if v.is_envd):
            for peer in (v for v in group.variants if not v.is_envd):
                ratios = [
                    p.seconds / e.seconds for e, p in zip(envd.results, peer.results, strict=True)
                ]
                listed = ", ".join(f"{r:.2f}" for r in ratios)
                median = statistics.median(ratios)
                print(f"| {envd.name} vs {peer.name} | {listed} | {median:.2f} |")


def describe_run() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    model = "unknown CPU"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    date = time.strftime("%Y-%m-%d")
    return f"commit {commit}, {date}, {os.cpu_count()} x {model}, Python {sys.version.split()[0]}"


def load() -> str:
    return " ".join(f"{average:.1f}" for average in os.getloadavg())


def login_user() -> str:
    """Who runs the commands and owns the uploads on both sides: the unprivileged account E2B
    templates have when the bench runs as root (created if missing), else whoever runs it."""
    if os.geteuid() != 0:
        return getpass.getuser()
    subprocess.run([REPO / "packaging" / "add-user"], check=True)
    return "user"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--size-mib", type=int, default=1024, help="of the large transfers")
    parser.add_argument("--jupyter-venv", help="keep Jupyter Server's virtualenv here for reuse")
    parser.add_argument("--only", nargs="+", choices=["transfer", "small", "echo", "jupyter"])
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    require_sdk_python()
    work = Path(tempfile.mkdtemp(prefix="bench-peers-", dir="/dev/shm"))
    setup = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    # The login user reads its authorized_keys here (sshd reads it with that user's rights)
    # and the payload there.
    setup.chmod(0o755)
    work.chmod(0o755)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, setup, ignore_errors=True)
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        user = login_user()
        cgroups = CpuCgroups()
        stack.callback(cgroups.remove)
        envd = EnvdServer(setup, user)
        stack.callback(envd.stop)
        envd.meter(cgroups)
        (setup / "ssh").mkdir()
        ssh = SshServer(setup / "ssh", user)
        stack.callback(ssh.stop)
        ssh.meter(cgroups)
        (setup / "jupyter").mkdir()
        (work / "jupyter").mkdir()
        jupyter = JupyterServer(
            venv_home(args.jupyter_venv, setup), setup / "jupyter", work / "jupyter"
        )
        stack.callback(jupyter.stop)
        jupyter.meter(cgroups)
        bench = Bench(work, envd, ssh, jupyter, args.size_mib * MIB)
        stack.callback(bench.close)
        groups = {
            "transfer": bench.transfer_groups(),
            "small": [bench.small_group()],
            "echo": [bench.echo_group()],
            "jupyter": [bench.jupyter_group()],
        }
        chosen = [
            g for name, gs in groups.items() if not args.only or name in args.only for g in gs
        ]
        print(f"{describe_run()}, load {load()} before", file=sys.stderr)
        run_rounds(chosen, rounds)
        print(f"{describe_run()}, load {load()} after\n")
        report(chosen, rounds)
        if TRACEBACK_MARKER in envd.daemon.logs():
            sys.exit(f"envd logged a traceback:\n{envd.daemon.logs()}")


if __name__ == "__main__":
    main()
