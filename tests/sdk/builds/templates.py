"""What the build tests share: the harness's facts, unique template names, the REST calls the
SDK has no method for (delete, a build's status by ID), a build context on disk, and a
log collector that remembers when each entry arrived."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from e2b import LogEntry, Sandbox


@dataclass(frozen=True)
class Facts:
    # "debian", "busybox", "no-systemd": references in the test's registry; "hub": a Docker
    # Hub name of the busybox image, pulled through serve's --registry-mirror (the registry)
    images: dict[str, str]
    index: str  # the package index's address (HTTP on :80)
    indexRoot: str  # the index's directory: files put there are served
    package: dict[str, str]  # the index's one package: project, module, greeting

    def pip_install(self, venv: str) -> str:
        """A shell command: a virtualenv at `venv` (pip comes with python3-venv) and the
        index's package installed into it from the fake internet."""
        return (f"python3 -m venv {venv} && {venv}/bin/pip --isolated "
                "--disable-pip-version-check install --no-cache-dir --retries 0 "
                f"--index-url http://{self.index}/simple/ --trusted-host {self.index} "
                f"{self.package['project']}")  # fmt: skip

    def release_file(self) -> tuple[str, Path]:
        """(URL, path) of a file not yet on the index: a build step can wait for the URL, and
        the test lets it go on by writing the path."""
        name = f"release-{uuid.uuid4().hex}"
        return f"http://{self.index}/{name}", Path(self.indexRoot) / name


def shouted(mark: str) -> tuple[str, str]:
    """(a shell command printing `mark` in upper case, what it prints): the log shows a step's
    command too, so only the upper-case text proves the step ran and its output was logged."""
    return f"echo {mark} | tr a-z A-Z", mark.upper()


def unique(what: str) -> str:
    """A template name of its own for this run (both SDK suites share one server)."""
    return f"py-{what}-{uuid.uuid4().hex[:8]}"


def api(method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"X-API-Key": os.environ["E2B_API_KEY"]}
    return httpx.request(method, os.environ["E2B_API_URL"] + path, headers=headers, timeout=60,
                         **kwargs)  # fmt: skip


def template_id(name: str) -> str | None:
    found = api("GET", f"/templates/aliases/{name}")
    if found.status_code == 404:
        return None
    assert found.status_code == 200, found.text
    return str(found.json()["templateID"])


def delete_template(name: str) -> None:
    """DELETE /templates/{id} of the template named `name` (the SDKs have no call for it);
    nothing when it does not exist (a build that failed before it was made)."""
    ident = template_id(name.split(":")[0])
    if ident is not None:
        deleted = api("DELETE", f"/templates/{ident}")
        assert deleted.status_code in (200, 204), deleted.text


def build_status(template: str, build: str, offset: int = 0) -> dict[str, Any]:
    got = api("GET", f"/templates/{template}/builds/{build}/status?logsOffset={offset}")
    assert got.status_code == 200, got.text
    body: dict[str, Any] = got.json()
    return body


def through_proxy(sandbox: Sandbox, port: int) -> httpx.Response:
    """GET / of the sandbox's `port`, sent to sandboxd's proxy by the sandbox's host name."""
    headers = {"Host": sandbox.get_host(port)}
    return httpx.get(os.environ["E2B_SANDBOX_URL"] + "/", headers=headers, timeout=30)


def run(sandbox: Sandbox, command: str, **options: Any) -> str:
    out: str = sandbox.commands.run(command, **options).stdout
    return out.strip()


@dataclass
class Logs:
    """on_build_logs: every entry, and the IDs the SDK's own first entries name."""

    entries: list[LogEntry] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    ids: tuple[str, str] | None = None  # (template, build)

    def __call__(self, entry: LogEntry) -> None:
        self.entries.append(entry)
        self.arrived.append(time.monotonic())
        if entry.message.startswith("Template created with ID: "):
            template, build = entry.message.removeprefix("Template created with ID: ").split(
                ", Build ID: "
            )
            self.ids = (template.strip(), build.strip())

    @property
    def text(self) -> str:
        return "\n".join(e.message for e in self.entries)

    def lines(self, needle: str) -> list[str]:
        return [e.message for e in self.entries if needle in e.message]
