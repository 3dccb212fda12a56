"""One build's log: the lines the status call pages through with `logsOffset`. Kept in memory
while the build runs (a RUN step can print thousands of lines, each a poll away from the
client) and written to the store in batches, at least every FLUSH_S and at the end, so that a
finished build's log survives a restart."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from sandboxd.ids import now_us
from sandboxd.store.rows import LogLine

if TYPE_CHECKING:
    from sandboxd.store.interface import Store

FLUSH_S = 0.5
MAX_LINE = 16 << 10  # one line's characters; a longer one is cut (a binary blob on stdout)


class BuildLog:
    def __init__(self, store: Store, build_id: str) -> None:
        self.store = store
        self.build_id = build_id
        self.lines: list[LogLine] = []
        self._flushed = 0
        self._partial: dict[str, str] = {}  # an output stream's last, unterminated line
        self._flusher: asyncio.Task[None] | None = None

    def add(self, message: str, level: str = "info", step: str | None = None) -> None:
        if len(message) > MAX_LINE:
            message = message[:MAX_LINE] + " [cut]"
        self.lines.append(LogLine(len(self.lines), now_us(), level, message, step))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    def output(self, stream: str, data: bytes, step: str | None) -> None:
        """A process's output, a line at a time, stderr too as `info` (build tools write their
        progress there)."""
        text = self._partial.pop(stream, "") + data.decode(errors="replace")
        *whole, rest = text.split("\n")
        for line in whole:
            self.add(line.rstrip("\r"), "info", step)
        if rest:
            self._partial[stream] = rest

    def end_output(self, step: str | None) -> None:
        for stream in list(self._partial):
            self.add(self._partial.pop(stream), "info", step)

    @property
    def last_step(self) -> str | None:
        """The step of the latest line that names one (where a build stopped)."""
        return next((line.step for line in reversed(self.lines) if line.step), None)

    def page(self, offset: int, limit: int) -> list[LogLine]:
        return self.lines[offset : offset + limit]

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_S)
        await self.flush()

    async def flush(self) -> None:
        new = self.lines[self._flushed :]
        if new:
            self._flushed += len(new)
            await self.store.write(functools.partial(self.store.add_log_lines, self.build_id, new))
