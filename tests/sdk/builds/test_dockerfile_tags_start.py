"""A Dockerfile, tags and names with tags, a start command with its ready check, and delete,
through the unmodified Python SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from e2b import Sandbox, SandboxException, Template, wait_for_port

from tests.sdk.builds.templates import (
    Facts,
    api,
    delete_template,
    run,
    template_id,
    through_proxy,
    unique,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(900)

# The user running the process whose arguments (after the program) are `args` (no ps here).
OWNER_OF = """python3 -c 'import os, pwd, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")[:-1]
        if b" ".join(argv[1:]) == sys.argv[1].encode():
            print(pwd.getpwuid(os.stat(f"/proc/{{pid}}").st_uid).pw_name)
    except OSError:
        pass' '{args}'"""


def test_dockerfile(facts: Facts, made: list[Sandbox], built: list[str], tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "page.txt").write_text("copied page\n")
    dockerfile = f"""\
FROM {facts.images["debian"]}
RUN echo from-dockerfile > /df && mkdir -p /srv/www && echo index page > /srv/www/index.html
COPY page.txt /srv/www/page.txt
ENV DF_VAR=dockerfile-env
WORKDIR /srv/www
USER user
CMD ["python3", "-m", "http.server", "8080"]
"""
    name = unique("dockerfile")
    built.append(name)
    Template.build(Template(file_context_path=ctx).from_dockerfile(dockerfile), name)
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    assert run(sandbox, "cat /df /srv/www/page.txt") == "from-dockerfile\ncopied page"
    assert run(sandbox, 'echo "$DF_VAR"; pwd; whoami') == "dockerfile-env\n/srv/www\nuser"
    # CMD is the start command, started in the workdir as the user (its ready check waits).
    answer = through_proxy(sandbox, 8080)
    assert answer.status_code == 200
    assert answer.text == "index page\n"
    assert run(sandbox, OWNER_OF.format(args="-m http.server 8080")) == "user"


def test_tags(facts: Facts, made: list[Sandbox], built: list[str]) -> None:
    name = unique("tags")
    built.append(name)

    def version(v: str) -> Template:
        return (
            Template()
            .from_image(facts.images["debian"])
            .run_cmd(f"echo {v} > /version", user="root")
        )

    v1 = Template.build(version("v1"), f"{name}:v1")
    assert "v1" in v1.tags
    Template.build(version("v2"), name, tags=["v2", "latest-two"])

    def version_of(ref: str) -> str:
        sandbox = Sandbox.create(ref)
        made.append(sandbox)
        return run(sandbox, "cat /version")

    assert version_of(f"{name}:v1") == "v1"
    assert version_of(f"{name}:v2") == "v2"
    assert version_of(f"{name}:latest-two") == "v2"
    # No build without a tag yet: the bare name (its `default` tag) names none, a clear 4xx.
    refused = api("POST", "/sandboxes", json={"templateID": name})
    assert refused.status_code in (400, 404), refused.text
    Template.build(version("v3"), name)
    assert version_of(name) == "v3"  # the default tag: the latest build without tags
    assert version_of(f"{name}:v2") == "v2"
    tags = {t.tag: t.build_id for t in Template.get_tags(name)}
    assert {"v1", "v2", "latest-two"} <= set(tags)
    assert tags["v1"] == v1.build_id

    assigned = Template.assign_tags(f"{name}:v1", ["stable"])
    assert assigned.build_id == v1.build_id
    assert version_of(f"{name}:stable") == "v1"
    Template.remove_tags(name, "stable")
    assert "stable" not in {t.tag for t in Template.get_tags(name)}
    with pytest.raises(SandboxException):
        made.append(Sandbox.create(f"{name}:stable"))
    refused = api("POST", "/sandboxes", json={"templateID": f"{name}:stable"})
    assert refused.status_code in (400, 404), refused.text


def test_start_command_ready_when_create_returns(
    facts: Facts, made: list[Sandbox], built: list[str]
) -> None:
    template = (
        Template()
        .from_image(facts.images["debian"])
        .set_user("root")
        .run_cmd("mkdir -p /srv/www && echo started > /srv/www/index.html")
        .set_workdir("/srv/www")
        # A slow start: the port opens only after a second.
        .set_start_cmd("sleep 1 && python3 -m http.server 8000", wait_for_port(8000))
    )
    name = unique("start")
    built.append(name)
    Template.build(template, name)
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    # No waiting: create returned once the ready command passed.
    answer = through_proxy(sandbox, 8000)
    assert answer.status_code == 200
    assert answer.text == "started\n"


def test_delete(facts: Facts, made: list[Sandbox], built: list[str]) -> None:
    name = unique("delete")
    built.append(name)
    Template.build(Template().from_image(facts.images["debian"]).run_cmd("true"), name)
    ident = template_id(name)
    assert ident is not None
    assert Template.exists(name)
    sandbox = Sandbox.create(name)
    made.append(sandbox)
    # Refused while a sandbox uses it.
    refused = api("DELETE", f"/templates/{ident}")
    assert refused.status_code in (400, 409), refused.text
    assert "used" in refused.json()["message"]
    sandbox.kill()
    made.clear()
    delete_template(name)
    assert not Template.exists(name)
    assert template_id(name) is None
    assert api("GET", f"/templates/{ident}").status_code == 404
    with pytest.raises(SandboxException):
        made.append(Sandbox.create(name))
