"""ProcessService: one short method per process.Process RPC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envd._gen.process.process_connect import Process

if TYPE_CHECKING:
    from envd.state import SandboxState


class ProcessService(Process):
    def __init__(self, state: SandboxState) -> None:
        self.state = state
