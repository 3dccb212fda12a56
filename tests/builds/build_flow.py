"""The SDKs' build flow over plain HTTP, for tests that check what the SDKs do not show: request
a build, upload its files through the signed URLs, start it, and page its status as the SDKs do
(every entry once, until a terminal status and then an empty page)."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.waiting import wait_until

TERMINAL = ("ready", "error")


@dataclass
class Build:
    template_id: str
    build_id: str
    status: dict[str, Any] = field(default_factory=dict)
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def messages(self) -> list[str]:
        return [e["message"] for e in self.entries]


def tar_of(files: dict[str, bytes | str], gzip: bool = True) -> bytes:
    """A build context: `name: content` regular files (a str content is a symlink target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gzip else "w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def request(api: httpx.Client, name: str, **body: Any) -> Build:
    answer = api.post("/v3/templates", json={"name": name, "cpuCount": 1, "memoryMB": 1024,
                                             **body})  # fmt: skip
    assert answer.status_code == 202, answer.text
    data = answer.json()
    return Build(data["templateID"], data["buildID"])


def upload(api: httpx.Client, template_id: str, files_hash: str, archive: bytes) -> None:
    answer = api.get(f"/templates/{template_id}/files/{files_hash}")
    assert answer.status_code == 201, answer.text
    if not answer.json()["present"]:
        put = httpx.put(answer.json()["url"], content=archive, timeout=60)
        assert put.is_success, put.text


def start(api: httpx.Client, build: Build, recipe: dict[str, Any]) -> httpx.Response:
    return api.post(f"/v2/templates/{build.template_id}/builds/{build.build_id}", json=recipe)


def poll(api: httpx.Client, build: Build, timeout_s: float = 600) -> Build:
    """Page the status until the build ended and a page came back empty."""

    def ended() -> bool:
        answer = api.get(f"/templates/{build.template_id}/builds/{build.build_id}/status",
                         params={"logsOffset": len(build.entries)})  # fmt: skip
        assert answer.status_code == 200, answer.text
        build.status = answer.json()
        page = build.status["logEntries"]
        build.entries += page
        return build.status["status"] in TERMINAL and not page

    wait_until(ended, timeout_s, f"build {build.build_id} to end")
    return build


def run(api: httpx.Client, name: str, recipe: dict[str, Any],
        files: dict[str, bytes] | None = None, **body: Any) -> Build:  # fmt: skip
    """Request, upload `files` (hash: archive), start and poll a build."""
    build = request(api, name, **body)
    for files_hash, archive in (files or {}).items():
        upload(api, build.template_id, files_hash, archive)
    answer = start(api, build, recipe)
    assert answer.status_code == 202, answer.text
    return poll(api, build)
