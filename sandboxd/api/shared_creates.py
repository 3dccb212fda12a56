"""Creates by `Idempotency-Key` across gateways (sandboxd.api.idempotency's contract, kept in the
shared database: a gateway's, sandboxd/daemon/gateway.py): the first create to insert the key's row makes the sandbox and records its id
there; a create with the same key through any gateway waits for that id. A create that failed
removes its row, so a retry tries again. The id is written in the transaction that records the
sandbox where the node service records one (sandboxd.store.riders), else in one of its own."""

from __future__ import annotations

import asyncio
import functools
import secrets
from typing import TYPE_CHECKING, Final

from sandboxd.api.errors import RequestError
from sandboxd.api.idempotency import MAX_KEY_LENGTH, WINDOW_S
from sandboxd.ids import now_us
from sandboxd.store.riders import riding
from sandboxd.store.rows import CreateKeyRow, key_hash

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandboxd.store.interface import Store

POLL_S: Final = 0.05  # how often a waiting create reads the key's row


def _settle(store: Store, row: CreateKeyRow, sandbox_id: str) -> Callable[[], None]:
    return functools.partial(store.settle_create_key, row.scope, row.key, row.claim, sandbox_id)


class SharedCreates:
    def __init__(self, store: Store, wait_s: float) -> None:
        self.store = store
        self.wait_s = wait_s  # how long the first create may take (its deadline)

    async def run(self, scope: str, key: str, create: Callable[[], Awaitable[str]]) -> str:
        """Raises RequestError: 400 for a key too long, 409 while the first create of the key
        outlasts its deadline; StoreUnavailable; whatever `create` raised."""
        if len(key) > MAX_KEY_LENGTH:
            raise RequestError(400, f"Idempotency-Key: longer than {MAX_KEY_LENGTH} characters")
        scope = key_hash(scope)  # the API key itself is never stored
        claim = secrets.token_hex(16)
        deadline = asyncio.get_running_loop().time() + self.wait_s
        while True:
            now = now_us()
            mine = CreateKeyRow(scope, key, claim, None, now)
            await self.store.write(functools.partial(
                self.store.claim_create_key, mine, now - int(WINDOW_S * 1e6)))  # fmt: skip
            row = self.store.create_key(scope, key)
            if row is not None and row.claim == claim:
                return await self._make(mine, create)
            sandbox_id = await self._made_elsewhere(scope, key, deadline)
            if sandbox_id is not None:
                return sandbox_id

    async def _made_elsewhere(self, scope: str, key: str, deadline: float) -> str | None:
        """The sandbox another create of the key made; None when that create failed (its row
        is gone: claim it again)."""
        loop = asyncio.get_running_loop()
        while (row := self.store.create_key(scope, key)) is not None:
            if row.sandbox_id is not None:
                return row.sandbox_id
            if loop.time() > deadline:
                raise RequestError(409, "a create with this Idempotency-Key is still under way")
            await asyncio.sleep(POLL_S)
        return None

    async def _make(self, mine: CreateKeyRow, create: Callable[[], Awaitable[str]]) -> str:
        store = self.store
        with riding(functools.partial(_settle, store, mine)) as waiting:
            try:
                sandbox_id = await create()
            except BaseException:
                release = functools.partial(
                    store.release_create_key, mine.scope, mine.key, mine.claim
                )
                await asyncio.shield(store.write(release))
                raise
        if waiting:  # no recording of the sandbox took the settlement along
            await store.write(_settle(store, mine, sandbox_id))
        return sandbox_id
