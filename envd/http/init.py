"""POST /init: the control plane hands the sandbox its env vars, access token, default user and
workdir, and the time. Mirrors the reference envd's api/init.go (token rules, replay protection,
plain-text errors); MMDS, CA bundles, NFS volumes and hyperloop are not part of a standalone
daemon: those fields are type-checked and otherwise ignored."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Final

from starlette.requests import ClientDisconnect
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from envd.http.body import BodyTooLargeError, read_capped
from envd.http.init_body import InitRequest, parse_init_body

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Receive

    from envd.settings import Settings
    from envd.state import SandboxState

log = logging.getLogger("envd.init")

# The reference envd's clock policy (init.go maxTimeInPast / maxTimeInFuture).
MAX_CLOCK_BEHIND_NS: Final = 50_000_000
MAX_CLOCK_AHEAD_NS: Final = 5_000_000_000

MISMATCH_MESSAGE: Final = "access token validation failed"
RESET_NOT_AUTHORIZED_MESSAGE: Final = "access token reset not authorized"


def token_rejection(state: SandboxState, request_token: str | None) -> str | None:
    """Why this /init may not proceed, or None (init.go validateInitAccessToken, without MMDS).

    The first /init may set any token; once one is set, /init must repeat it.
    """
    if state.access_token is None or state.token_matches(request_token):
        return None
    return RESET_NOT_AUTHORIZED_MESSAGE if request_token is None else MISMATCH_MESSAGE


def clock_needs_setting(now_ns: int, timestamp_ns: int) -> bool:
    """Whether the local clock is too far behind or ahead of the control plane's timestamp."""
    return now_ns < timestamp_ns - MAX_CLOCK_BEHIND_NS or now_ns > timestamp_ns + MAX_CLOCK_AHEAD_NS


def is_replay(state: SandboxState, timestamp_ns: int | None) -> bool:
    """A request strictly older than the newest one applied changes nothing (but still 204s)."""
    last = state.last_init_timestamp_ns
    return timestamp_ns is not None and last is not None and timestamp_ns < last


async def acquire_unless_client_gone(lock: asyncio.Lock, receive: Receive) -> bool:
    """Wait for `lock` while the client is still there. Returns whether it was acquired.

    The request body must already have been read: the only message left is the disconnect.
    """
    if not lock.locked():
        await lock.acquire()
        return True

    async def client_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    acquiring = asyncio.ensure_future(lock.acquire())
    watching = asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({acquiring, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not acquiring.done():
            acquiring.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await acquiring
    return not acquiring.cancelled()


def _set_clock(timestamp_ns: int) -> None:
    if not clock_needs_setting(time.time_ns(), timestamp_ns):
        return
    try:
        time.clock_settime_ns(time.CLOCK_REALTIME, timestamp_ns)
    except OSError as exc:  # the reference only logs this too
        log.error("cannot set the system clock: %s", exc)
    else:
        log.info("system clock set from /init timestamp")


def _apply(settings: Settings, state: SandboxState, request: InitRequest) -> None:
    """init.go SetData, for the fields a standalone daemon has."""
    if request.timestamp_ns is not None:
        state.last_init_timestamp_ns = request.timestamp_ns
        # Only the sandbox VM's own daemon may move the clock; -isnotfc means it is not one.
        if not settings.isnotfc:
            _set_clock(request.timestamp_ns)
    if request.env_vars is not None:
        state.replace_user_env(request.env_vars)
    # Absent clears the token; the rules above only let that through when none was set.
    state.access_token = request.access_token
    if request.default_user:
        state.default_user = request.default_user
    if request.default_workdir:
        state.default_workdir = request.default_workdir
    log.debug(
        "/init applied: %s env vars, token %s, default user %r, default workdir %r",
        "no" if request.env_vars is None else len(request.env_vars),
        "set" if request.access_token else "cleared",
        state.default_user,
        state.default_workdir,
    )


def routes(settings: Settings, state: SandboxState) -> list[BaseRoute]:
    async def init(http_request: Request) -> Response:
        try:
            request = parse_init_body(await read_capped(http_request))
        except BodyTooLargeError as exc:
            # Not the reference's empty 400 (it has no cap): the status and the message say
            # that the size is the problem, and echo nothing of the body.
            log.info("/init rejected: %s", exc)
            return PlainTextResponse(str(exc), status_code=413)
        except ClientDisconnect:
            log.debug("/init abandoned: the client left before the end of the body")
            return Response(status_code=400)  # nobody is left to read it
        except (ValueError, TypeError) as exc:
            # The reference answers 400 with an empty body; the reason is never echoed (it may
            # be about the token).
            log.info("/init rejected: %s", exc)
            return Response(status_code=400)
        if not await acquire_unless_client_gone(state.init_lock, http_request.receive):
            return Response(status_code=503)
        try:
            rejection = token_rejection(state, request.access_token)
            if rejection is not None:
                return PlainTextResponse(rejection, status_code=401)
            if not is_replay(state, request.timestamp_ns):
                _apply(settings, state, request)
        finally:
            state.init_lock.release()
        # No X-Envd-Version header: the reference sends it only since 0.6.12 and we claim 0.6.4.
        return Response(status_code=204, headers={"Cache-Control": "no-store"})

    return [Route("/init", init, methods=["POST"])]
