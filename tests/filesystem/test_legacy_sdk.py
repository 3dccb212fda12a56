"""The 2024 Python SDK (User-Agent exactly `connect-python`) gets reduced messages (§8.1)."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from pathlib import Path

    from tests.envd_process import EnvdProcess

LEGACY = {"user-agent": "connect-python", "content-type": "application/json"}


def test_unary_entries_reduced(envd: EnvdProcess, workdir: Path) -> None:
    (workdir / "f").write_text("abc")
    url = envd.url + "/filesystem.Filesystem"
    r = httpx.post(f"{url}/Stat", json={"path": str(workdir / "f")}, headers=LEGACY)
    assert r.status_code == 200
    assert r.headers["x-e2b-legacy-sdk"] == "true"
    assert r.json() == {
        "entry": {"name": "f", "type": "FILE_TYPE_FILE", "path": str(workdir / "f")}
    }
    r = httpx.post(f"{url}/ListDir", json={"path": str(workdir)}, headers=LEGACY)
    assert r.json()["entries"] == [
        {"name": "f", "type": "FILE_TYPE_FILE", "path": str(workdir / "f")}
    ]
    # Errors are untouched; other user agents get full entries.
    r = httpx.post(f"{url}/Stat", json={"path": str(workdir / "missing")}, headers=LEGACY)
    assert r.json()["code"] == "not_found"
    r = httpx.post(f"{url}/Stat", json={"path": str(workdir / "f")})
    assert "x-e2b-legacy-sdk" not in r.headers
    assert r.json()["entry"]["size"] == "3"


def test_watch_events_reduced(envd: EnvdProcess, workdir: Path) -> None:
    body = json.dumps({"path": str(workdir), "includeEntry": True}).encode()
    headers = {**LEGACY, "content-type": "application/connect+json"}
    with (
        httpx.Client(base_url=envd.url, timeout=10) as client,
        client.stream(
            "POST",
            "/filesystem.Filesystem/WatchDir",
            content=struct.pack(">BI", 0, len(body)) + body,
            headers=headers,
        ) as r,
    ):
        assert r.headers["x-e2b-legacy-sdk"] == "true"
        frames = r.iter_raw()
        buffer = b""
        messages: list[dict[str, object]] = []
        while len(messages) < 2:
            buffer += next(frames)
            while len(buffer) >= 5 and len(buffer) >= 5 + struct.unpack(">I", buffer[1:5])[0]:
                size = struct.unpack(">I", buffer[1:5])[0]
                messages.append(json.loads(buffer[5 : 5 + size]))
                buffer = buffer[5 + size :]
            if len(messages) == 1:
                (workdir / "new").write_text("")
        assert messages == [
            {"start": {}},
            {"filesystem": {"name": "new", "type": "EVENT_TYPE_CREATE"}},
        ]
