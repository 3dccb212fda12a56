"""The build cache (a second build of the same steps reuses them; skip_cache does not) and a
failing step (the SDK's BuildException, the step's number and output), through the unmodified
Python SDK."""

from __future__ import annotations

import uuid

import pytest
from e2b import BuildException, Sandbox, SandboxException, Template

from tests.sdk.builds.templates import Facts, Logs, api, build_status, run, shouted, unique

pytestmark = pytest.mark.timeout(900)


def stamp_of(name: str, made: list[Sandbox]) -> str:
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    return run(sandbox, "cat /stamp /after")


def test_cached_rebuild(facts: Facts, made: list[Sandbox], built: list[str]) -> None:
    say_mark, mark = shouted(f"stamped-{uuid.uuid4().hex}")
    template = (
        Template()
        .from_image(facts.images["debian"])
        .set_user("root")
        .run_cmd(f"date +%s%N > /stamp && {say_mark}")
        .set_envs({"CACHED": "yes"})
        .run_cmd('echo "$CACHED" > /after')
    )
    name = unique("cache")
    built.append(name)
    first_logs, second_logs, forced_logs = Logs(), Logs(), Logs()
    Template.build(template, name, on_build_logs=first_logs)
    first = stamp_of(name, made)
    assert first_logs.lines(mark)

    Template.build(template, name, on_build_logs=second_logs)
    # The same result, and no step ran again: the logs say the steps were cached.
    assert stamp_of(name, made) == first
    assert not second_logs.lines(mark), second_logs.text
    cached = [m for m in second_logs.lines("") if "cached" in m.lower() and "upload" not in m]
    assert cached, second_logs.text

    Template.build(template, name, on_build_logs=forced_logs, skip_cache=True)
    assert forced_logs.lines(mark)
    assert stamp_of(name, made) != first


def test_failing_step(facts: Facts, made: list[Sandbox], built: list[str]) -> None:
    say_out, out = shouted(f"out-{uuid.uuid4().hex}")
    say_err, err = shouted(f"err-{uuid.uuid4().hex}")
    template = (
        Template()
        .from_image(facts.images["debian"])
        .run_cmd("echo fine > /tmp/fine")
        .run_cmd(f"{say_out} && ({say_err}) >&2 && exit 7")
        .run_cmd("echo never > /tmp/never")
    )
    name = unique("failing")
    built.append(name)
    logs = Logs()
    with pytest.raises(BuildException) as raised:
        Template.build(template, name, on_build_logs=logs)
    # E2B's builder's words, which SDK users match on.
    assert "failed to run command '" in str(raised.value), str(raised.value)
    assert "command failed: exit status 7" in str(raised.value), str(raised.value)
    # The step's output, both streams, reached the logs.
    assert logs.lines(out), logs.text
    assert logs.lines(err), logs.text
    assert logs.ids is not None
    status = build_status(*logs.ids)
    assert status["status"] == "error"
    assert status["reason"]["step"] == "2", status["reason"]
    # No template to start a sandbox from: the build made none (a clear 4xx, not a 500).
    with pytest.raises(SandboxException):
        made.append(Sandbox.create(name))
    refused = api("POST", "/sandboxes", json={"templateID": name})
    assert refused.status_code in (400, 404), refused.text


def test_image_that_does_not_exist(facts: Facts, built: list[str]) -> None:
    registry = facts.images["debian"].split("/")[0]
    name = unique("noimage")
    built.append(name)
    logs = Logs()
    with pytest.raises(BuildException) as raised:
        Template.build(
            Template().from_image(f"{registry}/builds/nosuchimage:latest").run_cmd("true"),
            name,
            on_build_logs=logs,
        )
    assert "nosuchimage" in str(raised.value), str(raised.value)
    assert logs.ids is not None
    assert build_status(*logs.ids)["reason"]["step"] == "base"
