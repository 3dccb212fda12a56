"""A request for a sandbox that is not running (sandboxd/proxy/relay.py hands it here): held,
its reading stopped, while the lookup wakes the sandbox (E2B's auto-resume,
sandboxd/lifecycle/wake.py), then relayed as any other; or answered as E2B's proxy does: 502
when nothing was woken, 409 when a pause or resume is still under way, 403 for credentials that
would not resume it. The client sees latency only."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sandboxd.errors import StillTransitioning, WakeRefused
from sandboxd.lifecycle.ingress import Credentials
from sandboxd.proxy.exchange import Answer, json_answer, sandbox_not_found
from sandboxd.proxy.routing import ACCESS_TOKEN_HEADER, TRAFFIC_TOKEN_HEADER

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.lifecycle.ingress import Location
    from sandboxd.proxy.exchange import Client, Exchange, Request
    from sandboxd.proxy.routing import SandboxLookup, Target

log = logging.getLogger("sandboxd.proxy.waking")

# E2B's words (client-proxy's templated errors).
STILL_TRANSITIONING = "The sandbox is still transitioning. Try again in a moment."
WAKE_REFUSED = ("This sandbox can't be resumed with the credentials provided. "
                "Check your access token and try again.")  # fmt: skip


def credentials(request: Request) -> Credentials:
    """The access tokens the request carries."""
    headers = request.head.headers
    envd, traffic = headers.get(ACCESS_TOKEN_HEADER), headers.get(TRAFFIC_TOKEN_HEADER)
    return Credentials(
        None if envd is None else envd.decode("latin-1"),
        None if traffic is None else traffic.decode("latin-1"),
    )


class Waking:
    """The exchange of a request for a sandbox not running: `admit(location)` makes the
    exchange that relays it once the sandbox runs. What of the request arrives meanwhile is
    kept and handed on; `tasks` holds the wake until it ends (the loop keeps only weak ones)."""

    def __init__(self, client: Client, request: Request, target: Target, lookup: SandboxLookup,
                 admit: Callable[[Location], Exchange],
                 tasks: set[asyncio.Task[None]]) -> None:  # fmt: skip
        self.client, self.request, self.target = client, request, target
        self.lookup, self.admit, self.tasks = lookup, admit, tasks
        self.next: Exchange | None = None  # once the wake ended: the relay, or an answer
        self.parts: list[bytes] = []
        self.ended = False
        self.writable = True
        self.lost = False

    # Exchange

    def start(self) -> None:
        self.client.hold_reading("waking", True)
        task = asyncio.ensure_future(self._wake())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def body(self, data: bytes) -> None:
        if self.next is None:
            self.parts.append(data)
        else:
            self.next.body(data)

    def end(self) -> None:
        if self.next is None:
            self.ended = True
        else:
            self.next.end()

    def flush(self) -> None:
        if self.next is not None:
            self.next.flush()

    def client_writable(self, writable: bool) -> None:
        self.writable = writable
        if self.next is not None:
            self.next.client_writable(writable)

    def client_lost(self) -> None:
        # The wake goes on (a resume is not stopped halfway): only its answer has no one to go to.
        self.lost = True
        if self.next is not None:
            self.next.client_lost()

    # internals

    async def _wake(self) -> None:
        try:
            exchange = await self._woken()
        finally:
            self.client.hold_reading("waking", False)
        if not self.lost:
            self._hand_to(exchange)

    async def _woken(self) -> Exchange:
        """The exchange that answers the request after the wake."""
        target = self.target
        try:
            location = await self.lookup.wake(
                target.sandbox_id, target.port, credentials(self.request)
            )
        except StillTransitioning:
            return self._answer(b"409 Conflict", STILL_TRANSITIONING)
        except WakeRefused:
            return self._answer(b"403 Forbidden", WAKE_REFUSED)
        except Exception:  # a failed resume, or worse: the client still gets E2B's 502
            log.exception("sandbox %s: resuming it for a request failed", target.sandbox_id)
            location = None
        if location is None:
            return Answer(self.client, self.request, *sandbox_not_found(target))
        return self.admit(location)

    def _answer(self, status: bytes, message: str) -> Answer:
        code = int(status.split()[0])
        body = {"sandboxId": self.target.sandbox_id, "message": message, "code": code}
        return Answer(self.client, self.request, *json_answer(body, status))

    def _hand_to(self, exchange: Exchange) -> None:
        """Give `exchange` what of the request arrived, and its turn."""
        self.next = exchange
        for part in self.parts:
            exchange.body(part)
        self.parts = []
        if self.ended:
            exchange.end()
        exchange.start()
        if not self.writable:
            exchange.client_writable(False)
        exchange.flush()
