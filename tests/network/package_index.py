"""A PEP 503 "simple" package index of one tiny wheel, for tests that install from the fake
internet (`pip download --index-url http://INDEX_ADDRESS/simple/ fake-internet-hello`).

The wheel is written with zipfile rather than built: a build would want a build backend, and
getting one is the network access these tests must not need.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

PROJECT = "fake-internet-hello"
VERSION = "1.0"
MODULE = "fake_internet_hello"
GREETING = "hello from the fake internet"
WHEEL = f"{MODULE}-{VERSION}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_files() -> dict[str, bytes]:
    """The wheel's members, RECORD included (with every other member's hash and size)."""
    info = f"{MODULE}-{VERSION}.dist-info"
    files = {
        f"{MODULE}.py": f"GREETING = {GREETING!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    return files


def make_index(root: Path) -> None:
    """Write `simple/` (the index pages) and `packages/` (the wheel) under `root`."""
    wheel = root / "packages" / WHEEL
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in wheel_files().items():
            archive.writestr(name, data)
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    page = root / "simple" / PROJECT / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../packages/{WHEEL}#sha256={sha256}">{WHEEL}</a>\n')
    (root / "simple" / "index.html").write_text(f'<a href="{PROJECT}/">{PROJECT}</a>\n')
