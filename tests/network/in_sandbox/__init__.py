"""Scripts the network tests run inside sandboxes with the sandbox's own python3 (`python3 -c
TEXT ARGS...`), shared by the tests in this repository's virtualenv, the Python SDK's and the
JS SDK's (which read the files)."""

from __future__ import annotations

from pathlib import Path


def script(name: str) -> str:
    """The text of `name`.py here."""
    return (Path(__file__).parent / f"{name}.py").read_text()
