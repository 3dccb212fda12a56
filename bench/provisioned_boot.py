"""Boot of a template built from an image, by its init: the debootstrap stage as an image in a
registry of the bench's own on 127.0.0.1 (tests/builds/registry_images.py; it holds systemd's
set already, so provisioning installs nothing and the serve needs no network), built with no
step by `serve --provision envd` (envd as the container's program, under nspawn's stub init)
and by `--provision systemd` (systemd as PID 1, envd its unit, the base template's slim boot),
against the base template (systemd, one layer) in the same serve.

Each figure: `POST /sandboxes` → 201 (the sandbox booted and its envd answered /init; serve
runs without `--pool`, so each create is a boot), then `DELETE`; the template and base
alternate, `--creates` of each per round, one serve per init.

Run as root: .venv/bin/python -m bench.provisioned_boot [--rounds 3] [--creates 10]
[--template DIR]
"""

from __future__ import annotations

import argparse
import time

from bench.sandboxd_lifecycle import p50_p95_ms, parse_args, scratch
from tests.builds.artifact_cache import ensure_artifact
from tests.builds.build_flow import run
from tests.builds.registry_images import DEBIAN_REPO, debian_layer, push_image
from tests.images.registry import start_registry
from tests.sandboxd.serving import NO_NETWORK, Sandboxd
from tests.sandboxd.template_cache import IMAGE_CACHE

INITS = ("envd", "systemd")


def timed_create(server: Sandboxd, template: str) -> float:
    with server.client() as api:
        started = time.perf_counter()
        answer = api.post("/sandboxes", json={"templateID": template, "timeout": 300})
        seconds = time.perf_counter() - started
        assert answer.status_code == 201, answer.text
        assert api.delete(f"/sandboxes/{answer.json()['sandboxID']}").status_code == 204
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--creates", type=int, default=10)
    args, template = parse_args(parser)
    series: dict[str, list[float]] = {"base": [], "envd": [], "systemd": []}
    with scratch("provisioned-boot-") as work:
        (work / "registry").mkdir()
        registry = start_registry(work / "registry")
        try:
            image = push_image(registry, work / "image", DEBIAN_REPO,
                               lambda out: debian_layer(IMAGE_CACHE, out))  # fmt: skip
            for init in INITS:
                server = Sandboxd(work / f"state-{init}", template, NO_NETWORK, "--envd-artifact",
                                  str(ensure_artifact()), "--provision", init)  # fmt: skip
                server.start()
                try:
                    with server.client() as api:
                        build = run(api, f"boot-{init}", {"fromImage": image, "steps": []})
                    assert build.status["status"] == "ready", build.messages
                    for round_ in range(args.rounds):
                        print(f"{init}: round {round_ + 1}", flush=True)
                        for _ in range(args.creates):
                            series[init].append(timed_create(server, f"boot-{init}"))
                            series["base"].append(timed_create(server, "base"))
                finally:
                    server.clean_up()
        finally:
            registry.stop()
    print("create → 201 (a boot, no pool):")
    for side, label in (("base", "base template (systemd)"),
                        ("envd", "image, --provision envd (envd as its program)"),
                        ("systemd", "image, --provision systemd (systemd as PID 1)")):  # fmt: skip
        print(f"  {label:48} {p50_p95_ms(series[side])}")


if __name__ == "__main__":
    main()
