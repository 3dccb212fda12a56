"""FilesystemService: one short method per filesystem.Filesystem RPC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envd._gen.filesystem.filesystem_connect import Filesystem

if TYPE_CHECKING:
    from envd.state import SandboxState


class FilesystemService(Filesystem):
    def __init__(self, state: SandboxState) -> None:
        self.state = state
