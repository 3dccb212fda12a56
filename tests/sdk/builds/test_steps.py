"""Builds through the unmodified Python SDK from the test's own images, with every step type,
checked inside a sandbox of the result (files, owners, modes, links, environment, working
directory, user), and the build's logs as they stream."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import pytest
from e2b import Sandbox, Template

from tests.sdk.builds.templates import Logs, build_status, run, shouted, unique

if TYPE_CHECKING:
    from pathlib import Path

    from e2b import LogEntry

    from tests.sdk.builds.templates import Facts

pytestmark = pytest.mark.timeout(900)

# Bounds a step waiting for a release file (1500 x 0.2 s): it fails rather than hangs.
# Debian's busybox has no adduser: the account `app`, written by hand.
ADD_APP = (
    "echo app:x:1001:1001::/home/app:/bin/sh >> /etc/passwd && echo app:x:1001: >> /etc/group"
    " && mkdir -p /home/app && chown app:app /home/app"
)
WAIT_FOR = "for i in $(seq 1500); do {get} >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1"


def test_debian_image_every_step_and_streamed_logs(
    facts: Facts, made: list[Sandbox], built: list[str], tmp_path: Path
) -> None:
    ctx = tmp_path / "ctx"
    (ctx / "app" / "sub").mkdir(parents=True)
    (ctx / "app" / "main.py").write_text("print('app')\n")
    (ctx / "app" / "sub" / "data.txt").write_text("data\n")
    os.symlink("main.py", ctx / "app" / "link.py")
    (ctx / "notes.txt").write_text("for user\n")
    # The first step prints a mark, then waits until the test has seen the mark in its logs
    # callback (while the build is still `building`) and released it.
    say_mark, mark = shouted(f"streamed-{uuid.uuid4().hex}")
    url, release = facts.release_file()
    logs = Logs()
    status_at_mark: list[str] = []

    def on_logs(entry: LogEntry) -> None:
        logs(entry)
        if mark in entry.message and logs.ids and not release.exists():
            status_at_mark.append(build_status(*logs.ids)["status"])
            release.write_text("go\n")

    template = (
        Template(file_context_path=ctx)
        .from_image(facts.images["debian"])
        .set_user("root")  # the steps' default user is `user`, as in E2B
        .run_cmd(f"{say_mark} && " + WAIT_FOR.format(get=f"curl -sf {url}"))
        .set_envs({"BUILD_GREETING": "hello builder", "SECOND": "two words"})
        .copy("app/", "/srv/app/")
        .set_workdir("/srv/app")
        .run_cmd(
            facts.pip_install("/opt/venv")
            + ' && echo "$BUILD_GREETING" > built-env && pwd > built-cwd'
        )
        .set_user("user")
        .run_cmd("whoami > /home/user/built-by && mkdir -p /home/user/work")
        .copy("notes.txt", "/home/user/notes.txt", user="user", mode=0o640)
        .set_workdir("/home/user/work")
    )
    name = unique("debian")
    built.append(name)
    info = Template.build(template, name, on_build_logs=on_logs)
    assert info.name == name
    assert status_at_mark == ["building"], logs.text
    # The steps' own output is in the logs: the mark, and pip's.
    assert logs.lines(mark)
    assert logs.lines(f"Successfully installed {facts.package['project']}"), logs.text

    sandbox = Sandbox.create(name)
    made.append(sandbox)
    assert run(sandbox, "cat /srv/app/main.py /srv/app/sub/data.txt") == "print('app')\ndata"
    assert run(sandbox, "readlink /srv/app/link.py") == "main.py"
    assert run(sandbox, "stat -c %U /srv/app/main.py /srv/app/sub") == "root\nroot"
    assert run(sandbox, "stat -c %U:%G:%a /home/user/notes.txt") == "user:user:640"
    assert run(sandbox, "cat /srv/app/built-env /srv/app/built-cwd") == "hello builder\n/srv/app"
    assert run(sandbox, "cat /home/user/built-by") == "user"
    module = facts.package["module"]
    imported = f"/opt/venv/bin/python -c 'import {module} as m; print(m.GREETING)'"
    assert run(sandbox, imported) == facts.package["greeting"]
    # The template's ENV, WORKDIR and USER are the sandbox's defaults.
    assert run(sandbox, 'echo "$BUILD_GREETING:$SECOND"') == "hello builder:two words"
    assert run(sandbox, "pwd") == "/home/user/work"
    assert run(sandbox, "whoami") == "user"


def test_busybox_image(facts: Facts, made: list[Sandbox], built: list[str], tmp_path: Path) -> None:
    """An image without systemd, Python, bash or a package manager (busybox and glibc only)."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "tool.sh").write_text('#!/bin/sh\necho "tool says $MODE"\n')
    template = (
        Template(file_context_path=ctx)
        .from_image(facts.images["busybox"])
        .set_user("root")
        .run_cmd(f"{ADD_APP} && echo made > /made-by-root")
        .set_envs({"MODE": "busy"})
        .copy("tool.sh", "/usr/local/bin/tool.sh", mode=0o755)
        .set_workdir("/srv")
        .set_user("app")
        .run_cmd('id -un > /home/app/who && echo "$MODE" > /home/app/mode && pwd > /home/app/cwd')
        # Installs over HTTP with what busybox has: its wget.
        .run_cmd(f"wget -q -O /home/app/index.html http://{facts.index}/simple/")
    )
    name = unique("busybox")
    built.append(name)
    Template.build(template, name)

    sandbox = Sandbox.create(name)
    made.append(sandbox)
    assert run(sandbox, "cat /made-by-root") == "made"
    assert run(sandbox, "stat -c %U:%a /made-by-root") == "root:644"
    assert run(sandbox, "stat -c %U:%a /usr/local/bin/tool.sh") == "root:755"
    assert run(sandbox, "tool.sh") == "tool says busy"
    assert run(sandbox, "cat /home/app/who /home/app/mode /home/app/cwd") == "app\nbusy\n/srv"
    assert run(sandbox, "stat -c %U /home/app/who") == "app"
    assert facts.package["project"] in run(sandbox, "cat /home/app/index.html")
    assert run(sandbox, "whoami") == "app"
    assert run(sandbox, "pwd") == "/srv"
    assert run(sandbox, 'echo "$MODE"') == "busy"


def test_docker_hub_name_through_a_plain_http_mirror(
    facts: Facts, made: list[Sandbox], built: list[str]
) -> None:
    """A Docker Hub name (`busybox-test:1`, no registry) pulled through serve's --registry-mirror,
    a plain-HTTP registry on loopback: plain HTTP is decided on the mirror, not on Docker Hub."""
    name = unique("hub")
    built.append(name)
    template = Template().from_image(facts.images["hub"]).run_cmd("echo pulled > ~/pulled")
    Template.build(template, name)
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    assert run(sandbox, "cat ~/pulled") == "pulled"


def test_from_template(facts: Facts, made: list[Sandbox], built: list[str]) -> None:
    parent, child = unique("parent"), unique("child")
    built += [child, parent]  # the child first: it stands on the parent
    Template.build(
        Template().from_image(facts.images["debian"]).run_cmd("echo parent > /parent", user="root"),
        parent,
    )
    Template.build(
        Template()
        .from_template(parent)
        .run_cmd("echo child > /child && cat /parent > /seen", user="root"),
        child,
    )
    sandbox = Sandbox.create(child)
    made.append(sandbox)
    assert run(sandbox, "cat /parent /child /seen") == "parent\nchild\nparent"
    # The parent is unchanged.
    parent_sandbox = Sandbox.create(parent)
    made.append(parent_sandbox)
    assert run(parent_sandbox, "cat /parent; test -e /child || echo no-child") == "parent\nno-child"
