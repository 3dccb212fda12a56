"""Creates by `Idempotency-Key` (sent by the SDKs when the user gives one, and kept across
their retries of 429/502/503/504): within WINDOW_S, a create with a key already seen for the
same team answers the same sandbox, also while the first is still booting, and never makes a
second one. A create that failed leaves no trace of its key, so a retry tries again. Kept in
memory: a sandboxd restart forgets the keys (the sandboxes stay)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final, Protocol

from sandboxd.api.errors import RequestError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

WINDOW_S: Final = 600.0
MAX_KEY_LENGTH: Final = 255


class Creates(Protocol):
    """Creates by Idempotency-Key: this process's (IdempotentCreates), or a cluster's."""

    async def run(self, scope: str, key: str, create: Callable[[], Awaitable[str]]) -> str:
        """The id of the sandbox `create` made for (`scope`, `key`), calling it only for a
        key not seen within the window.

        Raises:
            RequestError: 400 for a key longer than MAX_KEY_LENGTH; whatever `create` raised.
        """
        ...


class IdempotentCreates:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        # (team, idempotency key) → (when first seen, the sandbox id it made or will make)
        self._seen: dict[tuple[str, str], tuple[float, asyncio.Future[str]]] = {}

    async def run(self, scope: str, key: str, create: Callable[[], Awaitable[str]]) -> str:
        """The id of the sandbox `create` made for (`scope`, `key`), calling it only for a
        key not seen within the window.

        Raises:
            RequestError: 400 for a key longer than MAX_KEY_LENGTH; whatever `create` raised
                (to every request that waited on it).
        """
        if len(key) > MAX_KEY_LENGTH:
            raise RequestError(400, f"Idempotency-Key: longer than {MAX_KEY_LENGTH} characters")
        now = time.monotonic()
        self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
        if (seen := self._seen.get((scope, key))) is not None:
            return await asyncio.shield(seen[1])
        made: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._seen[(scope, key)] = (now, made)
        try:
            sandbox_id = await create()
        except BaseException as exc:
            del self._seen[(scope, key)]
            made.set_exception(exc)
            made.exception()  # retrieved: no "never retrieved" warning when nobody waited
            raise
        made.set_result(sandbox_id)
        return sandbox_id
