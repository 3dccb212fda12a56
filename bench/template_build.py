"""Template builds against `podman build` (Debian's podman, on the same machine, in the same
run): the same three-step Dockerfile FROM a Debian image in a registry of the bench's own on
127.0.0.1 (the debootstrap stage as one layer, tests/builds/registry_images.py), then a RUN, a
COPY and an ENV:

- cold build: from empty storage (a fresh sandboxd state directory; a fresh podman root), the
  image's pull included;
- cached rebuild: the same Dockerfile again (every step from the cache);
- create → first command from the result: the unmodified Python SDK's `Sandbox.create(name)`
  then `commands.run("true")` (bench/sdk_template_builder.py; each a boot: serve runs
  without `--pool`), against `podman run -d IMAGE sleep infinity` then `podman exec C true`;
- disk use of ten templates sharing the base (ten one-RUN Dockerfiles on the same image): the
  growth of sandboxd's state directory and of podman's root, `du` (blocks allocated), and
  all of each one's storage then (the pulled base, the first template, the ten).

sandboxd builds through the unmodified Python SDK (`Template.from_dockerfile`,
`Template.build`), with `--no-network` (nothing in the steps needs a network). podman runs as
root with its storage (`--root`, `--runroot`, `--tmpdir`) in the bench's temporary directory,
no events log, `--network none` for builds and containers, pulling from the same registry with
`--tls-verify=false`, with runc (crun refuses hybrid cgroup hierarchies) and an `nproc` limit
below the machine's (runc cannot set podman's default one without CAP_SYS_RESOURCE); the
cgroups podman made are removed afterwards. Goal (issue 24): ≤ 1.0x podman on each measure.

Rounds alternate which side goes first. `--only podman` runs the podman half alone.

Run as root: .venv/bin/python -m bench.template_build [--rounds 3] [--creates 10]
[--only podman|sandboxd] [--template DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.sandboxd_lifecycle import p50_p95_ms, parse_args, scratch
from bench.sdk_process import SdkProcess
from tests.builds.artifact_cache import ensure_artifact
from tests.builds.registry_images import DEBIAN_REPO, debian_layer, push_image
from tests.images.registry import start_registry
from tests.sandboxd.serving import API_KEY, NO_NETWORK, Sandboxd
from tests.sandboxd.template_cache import IMAGE_CACHE

if TYPE_CHECKING:
    from collections.abc import Iterator

DOCKERFILE = """\
FROM {image}
RUN mkdir -p /app && seq 1 200000 > /app/numbers && echo built > /app/built
COPY app.txt /app/app.txt
ENV GREETING=hello
"""
SHARING = 10  # templates sharing the base, for the disk figure
CGROUP_ROOT = Path("/sys/fs/cgroup")
PODMAN_CGROUP = "libpod_parent"  # where podman's cgroupfs manager puts containers and conmon


class Podman:
    """podman with all of its state under `dir` (see the module docstring)."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.limits = [
            "--ulimit",
            f"nofile={nofile}:{nofile}",
            "--ulimit",
            f"nproc={nproc}:{nproc}",
        ]
        self.base = ["podman", "--root", str(dir / "root"), "--runroot", str(dir / "run"),
                     "--tmpdir", str(dir / "tmp"), "--runtime", "runc", "--cgroup-manager",
                     "cgroupfs", "--events-backend", "none"]  # fmt: skip

    def run(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout.strip()

    def build(self, tag: str, context: Path, dockerfile: Path) -> float:
        begin = time.perf_counter()
        self.run("build", "--quiet", "--network", "none", "--tls-verify=false", *self.limits,
                 "-t", tag, "-f", str(dockerfile), str(context))  # fmt: skip
        return time.perf_counter() - begin

    def create_and_exec(self, tag: str) -> float:
        """`podman run -d` + `podman exec true`, timed; the container removed afterwards."""
        begin = time.perf_counter()
        container = self.run(
            "run", "-d", "--network", "none", *self.limits, tag, "sleep", "infinity"
        )
        self.run("exec", container, "true")
        elapsed = time.perf_counter() - begin
        self.run("rm", "-f", "-t", "0", container)
        return elapsed

    def reset(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.run("system", "reset", "--force")


@contextlib.contextmanager
def podman_cgroups_removed() -> Iterator[None]:
    """Remove, afterwards, the cgroups podman made (if it had none before)."""
    parents = [*CGROUP_ROOT.glob(f"*/{PODMAN_CGROUP}"), CGROUP_ROOT / PODMAN_CGROUP]
    existed = any(p.is_dir() for p in parents)
    try:
        yield
    finally:
        if not existed:
            for parent in [*CGROUP_ROOT.glob(f"*/{PODMAN_CGROUP}"), CGROUP_ROOT / PODMAN_CGROUP]:
                for child in sorted(parent.rglob("*"), key=lambda p: -len(p.parts)):
                    if child.is_dir():
                        child.rmdir()
                if parent.is_dir():
                    parent.rmdir()


def disk_kib(path: Path) -> int:
    out = subprocess.run(["du", "-sk", "-x", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


class SandboxdSide:
    """A sandboxd serve of its own (fresh state per `start`) and the SDK worker."""

    def __init__(self, work: Path, template: Path, artifact: Path, sdk: SdkProcess) -> None:
        self.work, self.template, self.artifact, self.sdk = work, template, artifact, sdk
        self.server: Sandboxd | None = None
        self.starts = 0

    def start(self) -> Sandboxd:
        self.starts += 1
        state = self.work / f"sandboxd-{self.starts}"
        self.server = Sandboxd(state, self.template, NO_NETWORK, "--envd-artifact",
                               str(self.artifact))  # fmt: skip
        self.server.start()
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.clean_up()
            self.server = None

    def build(self, name: str, context: Path, dockerfile: Path, skip_cache: bool = False) -> float:
        assert self.server is not None
        (seconds,) = self.sdk.ask("build", self.server.url, API_KEY, name, context, dockerfile,
                                  int(skip_cache))  # fmt: skip
        return float(seconds)

    def create(self, name: str) -> float:
        assert self.server is not None
        sandbox_id, seconds = self.sdk.ask("create", self.server.url, API_KEY, name)
        with self.server.client() as api:
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
        return float(seconds)


def write_context(work: Path, image: str) -> tuple[Path, Path]:
    context = work / "context"
    context.mkdir()
    (context / "app.txt").write_text("copied into the image\n")
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(DOCKERFILE.format(image=image))
    return context, dockerfile


def sharing_dockerfiles(work: Path, image: str) -> list[Path]:
    files = []
    for n in range(SHARING):
        path = work / f"Dockerfile.{n}"
        path.write_text(f"FROM {image}\nRUN echo template {n} > /template\n")
        files.append(path)
    return files


def measure(
    args: argparse.Namespace, work: Path, template: Path
) -> dict[str, dict[str, list[float]]]:
    registry_dir = work / "registry"
    registry_dir.mkdir()
    registry = start_registry(registry_dir)
    series: dict[str, dict[str, list[float]]] = {
        side: {"cold": [], "cached": [], "create": [], "disk": [], "disk_total": []}
        for side in ("sandboxd", "podman")
    }
    sdk: SdkProcess | None = None
    sandboxd: SandboxdSide | None = None
    try:
        image = push_image(registry, work / "image", DEBIAN_REPO,
                           lambda out: debian_layer(IMAGE_CACHE, out))  # fmt: skip
        context, dockerfile = write_context(work, image)
        shares = sharing_dockerfiles(context, image)
        sides = ["sandboxd", "podman"] if args.only is None else [args.only]
        if "sandboxd" in sides:
            sdk = SdkProcess("sdk_template_builder.py")
            sandboxd = SandboxdSide(work, template, ensure_artifact(), sdk)
        for round_ in range(args.rounds):
            order = sides if round_ % 2 == 0 else sides[::-1]
            for side in order:
                print(f"round {round_ + 1}: {side}", flush=True)
                if side == "podman":
                    podman_round(work / f"podman-{round_}", context, dockerfile, shares, args,
                                 series["podman"])  # fmt: skip
                else:
                    assert sandboxd is not None
                    sandboxd_round(sandboxd, context, dockerfile, shares, args, series["sandboxd"])
    finally:
        if sdk is not None:
            sdk.close()
        registry.stop()
    return series


def podman_round(dir: Path, context: Path, dockerfile: Path, shares: list[Path],
                 args: argparse.Namespace, series: dict[str, list[float]]) -> None:  # fmt: skip
    podman = Podman(dir)
    try:
        series["cold"].append(podman.build("bench:main", context, dockerfile))
        series["cached"].append(podman.build("bench:main", context, dockerfile))
        podman.create_and_exec("bench:main")  # untimed: podman's first container
        for _ in range(args.creates):
            series["create"].append(podman.create_and_exec("bench:main"))
        before = disk_kib(dir)
        for n, share in enumerate(shares):
            podman.build(f"bench:share{n}", context, share)
        series["disk"].append((disk_kib(dir) - before) / 1024)
        series["disk_total"].append(disk_kib(dir) / 1024)
    finally:
        podman.reset()
        shutil.rmtree(dir, ignore_errors=True)


def sandboxd_round(side: SandboxdSide, context: Path, dockerfile: Path, shares: list[Path],
                   args: argparse.Namespace, series: dict[str, list[float]]) -> None:  # fmt: skip
    server = side.start()
    try:
        series["cold"].append(side.build("bench-main", context, dockerfile))
        series["cached"].append(side.build("bench-main", context, dockerfile))
        side.create("bench-main")  # untimed: the SDK's first create in its process
        for _ in range(args.creates):
            series["create"].append(side.create("bench-main"))
        before = disk_kib(server.state_dir)
        for n, share in enumerate(shares):
            side.build(f"bench-share{n}", context, share)
        series["disk"].append((disk_kib(server.state_dir) - before) / 1024)
        series["disk_total"].append(disk_kib(server.state_dir) / 1024)
    finally:
        side.stop()


def report(series: dict[str, dict[str, list[float]]], load: tuple[float, float]) -> None:
    print(f"load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f}")
    for what, label in (("cold", "cold build"), ("cached", "cached rebuild"),
                        ("create", "create → first command")):  # fmt: skip
        figures = {side: s[what] for side, s in series.items() if s[what]}
        for side, samples in figures.items():
            print(f"{label:24s} {side:9s} {p50_p95_ms(samples)}")
        if len(figures) == 2:
            ratio = statistics.median(figures["sandboxd"]) / statistics.median(figures["podman"])
            print(f"{label:24s} ratio (p50 sandboxd / podman): {ratio:.2f}")
    for side, s in series.items():
        if s["disk"]:
            print(
                f"disk, {SHARING} templates on one base  {side:9s} "
                f"+{statistics.median(s['disk']):.1f} MiB (rounds: "
                f"{', '.join(f'{d:.1f}' for d in s['disk'])}); all of its storage then: "
                f"{statistics.median(s['disk_total']):.0f} MiB"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=10)
    parser.add_argument("--only", choices=["podman", "sandboxd"])
    args, template = parse_args(parser)
    if shutil.which("podman") is None and args.only != "sandboxd":
        raise SystemExit("podman is missing: run scripts/install as root")
    with podman_cgroups_removed(), scratch("template-build-") as work:
        load_before = os.getloadavg()[0]
        series = measure(args, work, template)
        load = (load_before, os.getloadavg()[0])
    report(series, load)


if __name__ == "__main__":
    main()
