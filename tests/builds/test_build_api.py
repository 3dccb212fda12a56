"""The build API over plain HTTP against a real `sandboxd serve` (builds over the base template:
no image, no envd artifact needed): the flow, the result inside a sandbox of it, the cache,
failures, tags, deletion, bad input, and builds that outlive their sandboxd. The SDK suites
(test_sdk_*.py) drive the same flow as users do."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from sandboxd.builds import upload_urls
from sandboxd.daemon.state_dir import SECRET_FILE
from sandboxd.lifecycle.tokens import Tokens
from sandboxd.templates.image import IO_URING_ENV
from tests.builds import build_flow
from tests.builds.build_flow import run, tar_of
from tests.sandboxd.serving import NO_NETWORK, Sandboxd, running_sandboxd
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.root

HASH_A = hashlib.sha256(b"context a").hexdigest()
HASH_B = hashlib.sha256(b"context b").hexdigest()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, base_template: Path) -> Iterator[Sandboxd]:
    state = tmp_path_factory.mktemp("builds") / "state"
    with running_sandboxd(state, base_template, NO_NETWORK) as s:
        yield s


@pytest.fixture
def api(server: Sandboxd) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def read_file(server: Sandboxd, sandbox_id: str, path: str) -> str:
    status, body = server.envd(sandbox_id, "GET", f"/files?path={path}&username=root")
    assert status == 200, (status, body)
    return bytes(body).decode()


def create(api: httpx.Client, template: str) -> str:
    answer = api.post("/sandboxes", json={"templateID": template, "timeout": 300})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["sandboxID"])


RECIPE: dict[str, Any] = {
    "fromTemplate": "base",
    "force": False,
    "steps": [
        {"type": "COPY", "args": ["app/", "/opt/app/", "", ""], "force": False,
         "filesHash": HASH_A, "resolveSymlinks": False},
        {"type": "ENV", "args": ["GREETING", "hello", "OTHER", "x y"], "force": False},
        {"type": "WORKDIR", "args": ["/srv/work"], "force": False},
        {"type": "RUN", "args": [("echo \"$GREETING from $(pwd) as $(id -un)\" > result.txt; "
                                  "echo to-stdout; echo to-stderr >&2")], "force": False},
        {"type": "USER", "args": ["root"], "force": False},
        {"type": "RUN", "args": ["cat /opt/app/main.txt > /srv/work/copied.txt"],
         "force": False},
    ],
}  # fmt: skip
CONTEXT = tar_of({"app/main.txt": b"main file\n", "app/link": "main.txt"})


def test_a_build_over_base_runs_its_steps_and_its_sandboxes_have_the_result(
    api: httpx.Client, server: Sandboxd
) -> None:
    build = run(api, "steps", RECIPE, {HASH_A: CONTEXT})
    assert build.status["status"] == "ready", build.messages
    assert "to-stdout" in build.messages
    assert "to-stderr" in build.messages
    assert {e["step"] for e in build.entries if "step" in e} >= {"base", "1", "4", "6"}
    sandbox = create(api, "steps")
    assert read_file(server, sandbox, "/srv/work/result.txt") == "hello from /srv/work as user\n"
    assert read_file(server, sandbox, "/srv/work/copied.txt") == "main file\n"
    status, envs = server.envd(sandbox, "GET", "/envs")
    assert status == 200
    assert json.loads(envs)["GREETING"] == "hello"
    info = api.get(f"/templates/{build.template_id}").json()
    assert info["builds"][0]["buildID"] == build.build_id
    assert info["builds"][0]["status"] == "ready"
    api.delete(f"/sandboxes/{sandbox}")


def test_a_rebuild_reuses_the_unchanged_steps_and_force_makes_them_again(
    api: httpx.Client, server: Sandboxd
) -> None:
    first = run(api, "cached", RECIPE, {HASH_A: CONTEXT})
    assert first.status["status"] == "ready", first.messages
    again = run(api, "cached", RECIPE)  # the files are present: nothing uploaded
    assert again.status["status"] == "ready", again.messages
    cached = [m for m in again.messages if m.startswith("CACHED")]
    assert len(cached) == 4, again.messages  # COPY, WORKDIR and both RUNs
    forced = run(api, "cached", {**RECIPE, "force": True})
    assert not [m for m in forced.messages if m.startswith("CACHED")], forced.messages
    made, remade = _layers_of(server, first.build_id), _layers_of(server, forced.build_id)
    assert len(made) == len(remade)
    assert not set(made[-4:]) & set(remade[-4:])  # new layers: the first build's stay as they are
    assert all(os.path.isdir(p) for p in made)
    after = run(api, "cached", RECIPE)  # later builds find the newest
    assert _layers_of(server, after.build_id) == remade
    changed = {**RECIPE, "steps": [*RECIPE["steps"][:5],
                                   {"type": "RUN", "args": ["true"], "force": False}]}  # fmt: skip
    partly = run(api, "cached", changed)
    assert len([m for m in partly.messages if m.startswith("CACHED")]) == 3, partly.messages


def test_a_failing_step_ends_the_build_with_its_number_and_output(
    api: httpx.Client, server: Sandboxd
) -> None:
    layers_before = _layer_names(server)
    recipe = {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo fine"], "force": False},
        {"type": "RUN", "args": ["echo about to fail; exit 7"], "force": False},
    ]}  # fmt: skip
    build = run(api, "failing", recipe)
    assert build.status["status"] == "error"
    assert build.status["reason"]["step"] == "2"
    # Worded as E2B's builder words it: SDK users match on it.
    assert build.status["reason"]["message"] == (
        "failed to run command 'echo about to fail; exit 7': command failed: exit status 7"
    )
    assert "about to fail" in build.messages
    assert build.entries[-1]["level"] == "error"
    made = _layer_names(server) - layers_before
    assert len(made) == 1, made  # the first step's layer; nothing of the failed one
    assert next(iter(made)).startswith("step-")
    # A template whose only build failed has nothing to boot.
    answer = api.post("/sandboxes", json={"templateID": "failing"})
    assert answer.status_code == 404
    assert "no successful build" in answer.text


def test_tags_point_at_builds_and_name_tag_creates_from_them(
    api: httpx.Client, server: Sandboxd
) -> None:
    v1 = run(api, "tagged:v1", {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo one > /version", "root"], "force": False}]})  # fmt: skip
    v2 = run(api, "tagged:v2", {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo two > /version", "root"], "force": False}]})  # fmt: skip
    assert v1.status["status"] == v2.status["status"] == "ready", (
        v1.status.get("reason"),
        v2.status.get("reason"),
        v1.messages,
    )
    assert api.post("/templates/tags", json={"target": "tagged:v1", "tags": ["stable"]}).json() \
        == {"buildID": v1.build_id, "tags": ["stable"]}  # fmt: skip
    tags = {t["tag"]: t["buildID"] for t in api.get(f"/templates/{v1.template_id}/tags").json()}
    assert tags == {"v1": v1.build_id, "v2": v2.build_id, "stable": v1.build_id}
    for ref, version in (("tagged:stable", "one"), ("tagged:v2", "two")):
        sandbox = create(api, ref)
        assert read_file(server, sandbox, "/version") == f"{version}\n"
        api.delete(f"/sandboxes/{sandbox}")
    # No build was tagged `default`: the bare name has nothing to boot.
    assert api.post("/sandboxes", json={"templateID": "tagged"}).status_code != 201
    gone = api.request("DELETE", "/templates/tags", json={"name": "tagged", "tags": ["stable"]})
    assert gone.status_code == 204
    assert api.post("/sandboxes", json={"templateID": "tagged:stable"}).status_code == 404
    unknown = api.request("DELETE", "/templates/tags", json={"name": "tagged", "tags": ["no"]})
    assert unknown.status_code == 404


def test_a_template_in_use_is_not_deleted_and_its_layers_go_with_it(
    api: httpx.Client, server: Sandboxd
) -> None:
    build = run(api, "deleted", {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo unique-to-deleted > /marker", "root"], "force": False}]})  # fmt: skip
    image_layers = _layers_of(server, build.build_id)
    sandbox = create(api, "deleted")
    refused = api.delete(f"/templates/{build.template_id}")
    assert refused.status_code == 400
    assert "used by sandboxes" in refused.text
    assert api.delete(f"/sandboxes/{sandbox}").status_code == 204
    assert api.delete(f"/templates/{build.template_id}").status_code == 204
    assert api.get(f"/templates/{build.template_id}").status_code == 404
    assert api.get("/templates/aliases/deleted").status_code == 404
    built = [p for p in image_layers if p.startswith(str(server.state_dir / "layers"))]
    assert built
    assert not any(os.path.exists(p) for p in built)


def _layer_names(server: Sandboxd) -> set[str]:
    layers = server.state_dir / "layers"
    return {p.name for p in layers.iterdir() if p.is_dir()} if layers.is_dir() else set()


def _layers_of(server: Sandboxd, build_id: str) -> list[str]:
    import sqlite3

    db = sqlite3.connect(server.state_dir / "sandboxd.db")
    try:
        (image,) = db.execute("SELECT image FROM builds WHERE build_id = ?", (build_id,)).fetchone()
    finally:
        db.close()
    # Kept relative to the state directory (sandboxd.layers.portable): as paths here.
    return [str(server.state_dir / p) for p in json.loads(image)["layers"]]


# Bad input


def test_bad_requests_and_steps_are_refused_naming_what_is_wrong(api: httpx.Client) -> None:
    assert api.post("/v3/templates", json={"name": "Bad Name"}).status_code == 400
    assert api.post("/v3/templates", json={"name": "base"}).status_code == 400
    assert api.post("/v3/templates", json={"name": "x", "cpuCount": 3}).status_code == 400
    build = build_flow.request(api, "refusals")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"fromTemplate": "base", "steps": [{"type": "ADD", "args": ["x", "y"]}]}, "unknown step type"),
        ({"fromTemplate": "base", "fromImage": "debian", "steps": []}, "exactly one"),
        ({"steps": []}, "exactly one"),
        ({"fromTemplate": "base", "steps": [{"type": "COPY", "args": ["a", "b"]}]}, "filesHash"),
        ({"fromTemplate": "base", "steps": [{"type": "ENV", "args": ["A"]}]}, "pairs"),
        ({"fromImage": "x", "fromImageRegistry": {"type": "aws"}, "steps": []}, "not supported"),
    ]  # fmt: skip
    for recipe, words in cases:
        answer = build_flow.start(api, build, recipe)
        assert answer.status_code == 400, answer.text
        assert words in answer.json()["message"]
    status = api.get(f"/templates/{build.template_id}/builds/{build.build_id}/status").json()
    assert status["status"] == "waiting"  # none of them started it
    assert build_flow.start(api, build, {"fromTemplate": "base", "steps": []}).status_code == 202
    again = build_flow.start(api, build, {"fromTemplate": "base", "steps": []})
    assert again.status_code == 400
    assert "not in waiting state" in again.text
    assert api.get(f"/templates/{build.template_id}/builds/nope/status").status_code == 404
    assert api.get(f"/templates/{build.template_id}/files/NOTAHASH").status_code == 400
    offset = api.get(f"/templates/{build.template_id}/builds/{build.build_id}/status",
                     params={"logsOffset": "-1"})  # fmt: skip
    assert offset.status_code == 400


def test_uploads_need_their_signature_and_bad_archives_leave_nothing(
    api: httpx.Client, server: Sandboxd
) -> None:
    build = build_flow.request(api, "uploads")
    url = api.get(f"/templates/{build.template_id}/files/{HASH_B}").json()["url"]
    unsigned = url.split("?")[0]
    assert httpx.put(unsigned, content=CONTEXT).status_code == 403
    assert httpx.put(url.replace("signature=", "signature=0"), content=CONTEXT).status_code == 403
    other = url.replace(HASH_B, HASH_A)  # a signature is for one hash
    assert httpx.put(other, content=CONTEXT).status_code == 403
    secret = Tokens((server.state_dir / SECRET_FILE).read_bytes()).uploads_key()
    expired = upload_urls.signed_path(secret, build.template_id, HASH_B, time.time() - 7200)
    answer = httpx.put(server.url + expired, content=CONTEXT)
    assert answer.status_code == 403
    assert "expired" in answer.text
    assert _declared_only(url, 1 << 50).startswith(b"HTTP/1.1 413 ")  # refused before the body
    escaping = tar_of({"../outside.txt": b"no"})
    assert httpx.put(url, content=escaping).status_code == 400
    assert not (server.state_dir / "uploads" / "outside.txt").exists()
    assert api.get(f"/templates/{build.template_id}/files/{HASH_B}").json()["present"] is False
    plain = tar_of({"ok.txt": b"fine"}, gzip=False)
    assert httpx.put(url, content=plain).is_success
    assert api.get(f"/templates/{build.template_id}/files/{HASH_B}").json()["present"] is True
    uploads = server.state_dir / "uploads" / build.template_id
    assert api.delete(f"/templates/{build.template_id}").status_code == 204
    assert not uploads.exists()


def test_a_build_from_an_image_without_the_envd_artifact_says_what_is_missing(
    api: httpx.Client,
) -> None:
    build = run(api, "no-artifact", {"fromImage": "127.0.0.1:1/nothing:latest", "steps": []})
    assert build.status["status"] == "error"
    assert build.status["reason"]["step"] == "base"
    assert "--envd-artifact" in build.status["reason"]["message"]


# Builds and their sandboxd


def test_a_build_running_when_sandboxd_stops_or_dies_ends_in_error(
    tmp_path: Path, base_template: Path
) -> None:
    with running_sandboxd(tmp_path / "state", base_template, NO_NETWORK) as server:
        for stop, reason in ((server.stop, "stopped"), (lambda: _kill(server), "restarted")):
            with server.client() as api:
                build = build_flow.request(api, f"interrupted-{reason}")
                recipe = {"fromTemplate": "base", "steps": [
                    {"type": "RUN", "args": ["echo started; sleep 600"], "force": False}]}  # fmt: skip
                assert build_flow.start(api, build, recipe).status_code == 202
                path = f"/templates/{build.template_id}/builds/{build.build_id}/status"
                wait_until(functools.partial(_logged, api, path, "started"), 120, "the step")
            stop()
            server.start()
            with server.client() as api:
                status = api.get(path).json()
                assert status["status"] == "error", status
                assert reason in status["reason"]["message"]
                if reason == "stopped":  # written at the stop (a kill may lose the last 0.5 s)
                    assert "started" in status["logs"]


def _declared_only(url: str, length: int) -> bytes:
    """The status line answering a PUT that declares `length` bytes and sends none of them."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port)) as conn:
        conn.sendall(f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())  # fmt: skip
        return conn.makefile("rb").readline()


def _logged(api: httpx.Client, path: str, line: str) -> bool:
    return line in api.get(path).json()["logs"]


def _kill(server: Sandboxd) -> None:
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    server.proc = None


def test_the_command_line_lists_and_removes_templates_beside_a_running_serve(
    api: httpx.Client, server: Sandboxd
) -> None:
    build = run(api, "by-cli:v3", {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo only-by-cli > /marker", "root"], "force": False}]})  # fmt: skip
    assert build.status["status"] == "ready", build.messages
    built = [p for p in _layers_of(server, build.build_id) if "/layers/" in p]
    listed = _cli(server, "template", "ls")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(build.template_id))
    assert "by-cli" in line
    assert "ready" in line
    assert "v3" in line
    sandbox = create(api, "by-cli:v3")
    refused = _cli(server, "template", "rm", "by-cli")
    assert refused.returncode == 2
    assert "used by sandboxes" in refused.stderr
    assert api.delete(f"/sandboxes/{sandbox}").status_code == 204
    removed = _cli(server, "template", "rm", "by-cli")
    assert removed.returncode == 0, removed.stderr
    assert f"deleted template {build.template_id}" in removed.stdout
    assert api.get(f"/templates/{build.template_id}").status_code == 404
    assert built
    assert not any(os.path.exists(p) for p in built)
    assert _cli(server, "template", "rm", "by-cli").returncode == 2  # gone: not found


def _cli(server: Sandboxd, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sandboxd", *args, "--state-dir", str(server.state_dir)]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def test_concurrent_builds_of_one_recipe_all_succeed_with_one_layer_each_step(
    api: httpx.Client, server: Sandboxd
) -> None:
    recipe = {"fromTemplate": "base", "steps": [
        {"type": "RUN", "args": ["echo shared-recipe > /shared", "root"], "force": False},
        {"type": "RUN", "args": ["echo second > /second", "root"], "force": False}]}  # fmt: skip
    builds = [build_flow.request(api, f"concurrent-{i}") for i in range(3)]
    for build in builds:  # more than run at once (2): the third waits for a slot
        assert build_flow.start(api, build, recipe).status_code == 202
    for build in builds:
        build_flow.poll(api, build)
        assert build.status["status"] == "ready", build.messages
    layers = [_layers_of(server, b.build_id) for b in builds]
    assert layers[0] == layers[1] == layers[2]  # the same steps: the same layers, made once
    assert not [p for p in (server.state_dir / "layers").iterdir() if p.name.startswith(".new-")]


def test_the_warm_pool_holds_sandboxes_whose_start_command_is_ready(
    tmp_path: Path, base_template: Path
) -> None:
    flags = (NO_NETWORK, "--pool", "1")
    with running_sandboxd(tmp_path / "state", base_template, *flags) as server, \
            server.client() as api:  # fmt: skip
        recipe = {"fromTemplate": "base", "steps": [],
                  "startCmd": "date +%s%N > /tmp/started; sleep infinity",
                  "readyCmd": "test -s /tmp/started"}  # fmt: skip
        build = run(api, "warm-start", recipe)
        assert build.status["status"] == "ready", build.messages
        assert any(m.startswith("finalize") for m in build.messages)
        boxes = server.state_dir / "sandboxes"
        # Before the create: the template's pool may have its sandbox ready by its answer.
        known = {p.name for p in boxes.iterdir() if _is_base_box(server, p.name)}
        booted = create(api, "warm-start")  # a boot: the template's pool fills from here on
        known.add(booted)
        assert read_file(server, booted, "/tmp/started").strip().isdigit()
        wait_until(lambda: {p.name for p in boxes.iterdir()} - known, 60, "a warm box")
        (warm,) = {p.name for p in boxes.iterdir()} - known
        waiting = f"warm pool: sandbox {warm} waiting"  # booted, its start command ready
        wait_until(lambda: waiting in server.log.read_text(), 60, "it to wait in the pool")
        pooled = create(api, "warm-start")
        assert pooled == warm  # its start command ran and was ready before the create
        assert read_file(server, pooled, "/tmp/started").strip().isdigit()


def _is_base_box(server: Sandboxd, sandbox_id: str) -> bool:
    """A box of the base template's pool (its record stacks base's root filesystem only)."""
    record = json.loads((server.box_dir(sandbox_id) / "sandbox.json").read_text())
    return len(record["layers"]) == 1


# io_uring_setup(1, params) (system call 425 on x86-64 and arm64): the ring's fd, or -1 and errno.
IO_URING_PROBE = ("python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                  "p = ctypes.create_string_buffer(120); "
                  "print(libc.syscall(425, 1, p), ctypes.get_errno())'")  # fmt: skip


@pytest.mark.parametrize(("env", "allowed"), [({}, False), ({IO_URING_ENV: "1"}, True)])
def test_io_uring_is_for_templates_that_ask_for_it(
    api: httpx.Client, server: Sandboxd, env: dict[str, str], allowed: bool
) -> None:
    """Refused to every sandbox (tests/sandboxd/test_escape.py) but those of a template whose
    ENV sets SANDBOXD_IO_URING=1: its build sandboxes (a RUN step) and its sandboxes (the start
    command, which runs in each before the create answers)."""
    name = f"uring-{'on' if allowed else 'off'}"
    steps = [{"type": "ENV", "args": [k, v], "force": False} for k, v in env.items()]
    # The build's layer keeps the home directory (/tmp is each sandbox's own tmpfs).
    steps.append({"type": "RUN", "args": [f"{IO_URING_PROBE} > /home/user/in-build"],
                  "force": False})  # fmt: skip
    recipe = {"fromTemplate": "base", "steps": steps,
              "startCmd": f"{IO_URING_PROBE} > /tmp/in-sandbox; sleep infinity",
              "readyCmd": "test -s /tmp/in-sandbox"}  # fmt: skip
    build = run(api, name, recipe)
    assert build.status["status"] == "ready", build.messages
    sandbox = create(api, name)
    for where in ("/home/user/in-build", "/tmp/in-sandbox"):
        fd, errno = read_file(server, sandbox, where).split()
        assert (int(fd) >= 0) if allowed else ((fd, errno) == ("-1", "1")), (where, fd, errno)
    api.delete(f"/sandboxes/{sandbox}")
