"""serve(): bind the listener, run uvicorn with envd's connection policy, tell systemd."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
from typing import TYPE_CHECKING, Final

import uvicorn

from envd.app import create_app, run_shutdown_hooks
from envd.connection import GuardedHttpToolsProtocol, connections_peak
from envd.connection_limits import ConnectionLimits
from envd.logs import setup_logging
from envd.memory import BurstWatch, release_free_heap
from envd.settings import ENVD_VERSION, Settings
from envd.state import SandboxState
from envd.systemd import sd_notify

if TYPE_CHECKING:
    from types import FrameType

    from starlette.applications import Starlette

log = logging.getLogger("envd.server")

# Must exceed the upstream proxy's idle timeout, or pooled connections get reset (Go: 640 s).
IDLE_TIMEOUT_S: Final = 640
# From SIGTERM to exit, everything included; the systemd unit's TimeoutStopSec matches it.
GRACEFUL_SHUTDOWN_S: Final = 5
# How long before that deadline the remaining connections are cut.
DISCONNECT_BEFORE_DEADLINE_S: Final = 1
# How long before it uvicorn cancels handlers that ignored the cut (stuck in a thread, say),
# leaving the rest for the lifespan's end and the loop's close.
CANCEL_BEFORE_DEADLINE_S: Final = 0.5
# uvicorn wakes every 0.1 s to poll for exit; its only periodic work (the Date header) needs
# one wake-up a second, and a signal wakes the loop at once (see main_loop).
TICK_S: Final = 1.0
RUN_DIR: Final = "/run/e2b"


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self.app = app
        self._exit_requested: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bursts = BurstWatch()
        self._trimming: asyncio.Future[None] | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._exit_requested = asyncio.Event()
        while not await self.on_tick(0):  # counter 0: refresh the Date header every tick
            self._trim_heap_after_bursts()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_requested.wait(), TICK_S)

    def _trim_heap_after_bursts(self) -> None:
        if self._trimming is not None and not self._trimming.done():
            # Looked at again once this trim is done, with the peak kept meanwhile: a burst
            # that ended while a (slow, on a busy host) trim ran was otherwise never trimmed.
            return
        open_now = len(self.server_state.connections)
        if not self._bursts.burst_ended(connections_peak(), open_now):
            return
        assert self._loop is not None  # noqa: S101  # set by main_loop, the only caller
        self._trimming = self._loop.run_in_executor(None, release_free_heap)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_requested is not None:
            # Runs in a signal handler: hand the wake-up to the loop thread-safely.
            self._loop.call_soon_threadsafe(self._exit_requested.set)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # the listener is bound: only now is envd reachable
            sd_notify(f"READY=1\nSTATUS=listening on port {self.config.port}")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        log.info("shutting down")
        sd_notify("STOPPING=1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACEFUL_SHUTDOWN_S
        # Cut what is still connected shortly before the deadline: handlers then see a client
        # disconnect and finish normally, instead of being cancelled (which uvicorn reports as
        # an ASGI exception with a traceback).
        cut = loop.call_at(deadline - DISCONNECT_BEFORE_DEADLINE_S, self._disconnect_all)
        try:
            await run_shutdown_hooks(self.app)
            # uvicorn counts its drain timeout from when it starts draining: give it what is
            # left, so the whole shutdown keeps to GRACEFUL_SHUTDOWN_S.
            left_s = max(0.0, deadline - CANCEL_BEFORE_DEADLINE_S - loop.time())
            # Annotated int, but uvicorn only hands it to asyncio.wait_for, which takes a float.
            self.config.timeout_graceful_shutdown = left_s  # type: ignore[assignment]
            await super().shutdown(sockets)
        finally:
            cut.cancel()

    def _disconnect_all(self) -> None:
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                # abort, not close: close() first flushes what a slow reader has not taken,
                # which can take minutes, and only then tells the handler.
                transport.abort()


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(False)
    return sock


def _write_marker_files(state: SandboxState) -> None:
    """/run/e2b/.E2B_SANDBOX mirrors the env var for processes that do not inherit it."""
    try:
        os.makedirs(RUN_DIR, mode=0o755, exist_ok=True)
        path = os.path.join(RUN_DIR, ".E2B_SANDBOX")
        with open(path, "w") as f:
            f.write(state.internal_env["E2B_SANDBOX"])
        os.chmod(path, 0o444)
    except OSError as exc:
        log.warning("cannot write %s markers: %s", RUN_DIR, exc)


def build_server(settings: Settings, sock: socket.socket) -> uvicorn.Server:
    state = SandboxState.for_settings(settings)
    _write_marker_files(state)
    app = create_app(settings, state)
    protocol = GuardedHttpToolsProtocol.with_limits(ConnectionLimits.from_environment())
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=sock.getsockname()[1],
        loop="uvloop",
        http=protocol,
        server_header=False,  # the reference sends none
        # envd reads neither the client address nor the scheme, so X-Forwarded-* from a
        # loopback peer need no rewriting (one ASGI layer less per request).
        proxy_headers=False,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_keep_alive=IDLE_TIMEOUT_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    return _Server(config, app)


def serve(settings: Settings) -> int:
    setup_logging(settings.verbose)
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, exc)
        return 1
    log.info("envd %s listening on %s:%d", ENVD_VERSION, settings.host, sock.getsockname()[1])
    server = build_server(settings, sock)
    # What start-up made lives as long as envd: keep it out of every later collection, and turn
    # the collector back on (envd.__main__ turns it off for start-up).
    gc.freeze()
    gc.enable()
    server.run(sockets=[sock])
    return 0
