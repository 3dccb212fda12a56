"""ProcessService: one short method per process.Process RPC (Go `process/service.go`).

Only Start resolves a user; every other RPC ignores the caller's identity, as in Go.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, ClassVar, Final

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.process.process_connect import Process
from envd._gen.process.process_pb import (
    CloseStdinResponse,
    ConnectResponse,
    ListResponse,
    ProcessConfig,
    ProcessInfo,
    SendInputResponse,
    SendSignalResponse,
    Signal,
    StartResponse,
    StreamInputResponse,
    UpdateResponse,
)
from envd.keepalive import keepalive_interval
from envd.process.handle import ProcessOperationError, PtyHasNoStdinError
from envd.process.registry import EmptySelectorError, ProcessNotFoundError, RetainedExit
from envd.process.spawn import SpawnError, SpawnRequest, child_env
from envd.process.streams import (
    end_of,
    process_events,
    process_timeout_s,
    start_event,
)
from envd.users import UnknownCallerError, expand_path

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from connectrpc.request import RequestContext

    from envd._gen.process.process_pb import (
        CloseStdinRequest,
        ConnectRequest,
        ListRequest,
        ProcessEvent,
        ProcessInput,
        SendInputRequest,
        SendSignalRequest,
        StartRequest,
        StreamInputRequest,
        UpdateRequest,
    )
    from envd.process.broadcast import Subscription
    from envd.process.handle import Chunk, ProcessHandle
    from envd.process.registry import ProcessRegistry
    from envd.state import SandboxState
    from envd.users import User, UserCache

_SIGNALS: Final = {Signal.SIGTERM: signal.SIGTERM, Signal.SIGKILL: signal.SIGKILL}


class ProcessService(Process):
    # The domain errors of these RPCs and their codes (Go `process/handler.go`, `input.go`),
    # applied by the app's ErrorMappingInterceptor; their messages are the reference's.
    ERROR_CODES: ClassVar[Mapping[type[Exception], Code]] = {
        UnknownCallerError: Code.UNAUTHENTICATED,
        EmptySelectorError: Code.UNIMPLEMENTED,
        ProcessNotFoundError: Code.NOT_FOUND,
        ProcessOperationError: Code.INTERNAL,
        PtyHasNoStdinError: Code.UNKNOWN,
    }

    def __init__(self, registry: ProcessRegistry, state: SandboxState, users: UserCache) -> None:
        self.registry = registry
        self.state = state
        self._users = users

    async def start(
        self, request: StartRequest, ctx: RequestContext[StartRequest, StartResponse]
    ) -> AsyncIterator[StartResponse]:
        headers = ctx.request_headers
        user = self._users.caller(headers.get("authorization"))
        timeout_s = process_timeout_s(headers)
        spawn_request = self._spawn_request(request, user)
        config = request.process or ProcessConfig()
        tag = request.tag if request.has_field("tag") else None
        try:
            handle, subscription = await self.registry.start(spawn_request, config, tag)
        except SpawnError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, _start_error(spawn_request, exc)) from None
        if timeout_s is not None:
            handle.kill_after(timeout_s)
        async for event in self._follow(handle, subscription, keepalive_interval(headers)):
            yield StartResponse(event=event)

    def _spawn_request(self, request: StartRequest, user: User) -> SpawnRequest:
        config = request.process or ProcessConfig()
        try:
            cwd = expand_path(config.cwd, user, self.state.default_workdir)
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from None
        if not os.path.lexists(cwd):
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist")
        size = request.pty.size if request.pty is not None else None
        pty_size = None
        if request.pty is not None:
            pty_size = (size.cols, size.rows) if size is not None else (0, 0)
        return SpawnRequest(
            cmd=config.cmd,
            args=list(config.args),
            env=child_env(user, self.state.env(), config.envs),
            cwd=cwd,
            user=user,
            pty_size=pty_size,
            # Unset means a pipe, for clients older than the flag (Go 0.3.0).
            stdin=request.stdin if request.has_field("stdin") else True,
        )

    async def _follow(
        self, handle: ProcessHandle, subscription: Subscription[Chunk], interval_s: float
    ) -> AsyncIterator[ProcessEvent]:
        """Events for one attached stream. Leaving (disconnect, deadline) only unsubscribes:
        the process carries on."""
        try:
            async for event in process_events(handle, subscription, interval_s):
                yield event
        finally:
            self.registry.unsubscribe(subscription)

    async def connect(
        self, request: ConnectRequest, ctx: RequestContext[ConnectRequest, ConnectResponse]
    ) -> AsyncIterator[ConnectResponse]:
        found = self.registry.find(request.process)
        if isinstance(found, RetainedExit):
            yield ConnectResponse(event=start_event(found.pid))
            yield ConnectResponse(event=end_of(found.end))
            return
        subscription = self.registry.subscribe(found)
        interval_s = keepalive_interval(ctx.request_headers)
        async for event in self._follow(found, subscription, interval_s):
            yield ConnectResponse(event=event)

    async def list(
        self, request: ListRequest, ctx: RequestContext[ListRequest, ListResponse]
    ) -> ListResponse:
        return ListResponse(
            processes=[
                ProcessInfo(config=h.config, pid=h.pid, tag=h.tag) for h in self.registry.live()
            ]
        )

    async def update(
        self, request: UpdateRequest, ctx: RequestContext[UpdateRequest, UpdateResponse]
    ) -> UpdateResponse:
        handle = self.registry.find_live(request.process)
        if request.pty is not None and request.pty.size is not None:
            handle.resize(request.pty.size.cols, request.pty.size.rows)
        return UpdateResponse()

    async def send_input(
        self, request: SendInputRequest, ctx: RequestContext[SendInputRequest, SendInputResponse]
    ) -> SendInputResponse:
        handle = self.registry.find_live(request.process)
        await _write_input(handle, request.input)
        return SendInputResponse()

    async def stream_input(
        self,
        request: AsyncIterator[StreamInputRequest],
        ctx: RequestContext[StreamInputRequest, StreamInputResponse],
    ) -> StreamInputResponse:
        handle: ProcessHandle | None = None
        async for message in request:
            event = message.event
            if event is None:
                raise ConnectError(Code.UNIMPLEMENTED, "invalid event type")
            if event.field == "start":
                handle = self.registry.find_live(event.value.process)
            elif event.field == "data":
                if handle is None:  # Go dereferences a nil handle here and drops the connection
                    raise ConnectError(Code.FAILED_PRECONDITION, "input before the start event")
                await _write_input(handle, event.value.input)
        return StreamInputResponse()

    async def send_signal(
        self, request: SendSignalRequest, ctx: RequestContext[SendSignalRequest, SendSignalResponse]
    ) -> SendSignalResponse:
        handle = self.registry.find_live(request.process)
        sig = _SIGNALS.get(request.signal)
        if sig is None:
            raise ConnectError(Code.UNIMPLEMENTED, "invalid signal")
        handle.send_signal(sig)
        return SendSignalResponse()

    async def close_stdin(
        self, request: CloseStdinRequest, ctx: RequestContext[CloseStdinRequest, CloseStdinResponse]
    ) -> CloseStdinResponse:
        self.registry.find_live(request.process).close_stdin()
        return CloseStdinResponse()


async def _write_input(handle: ProcessHandle, data: ProcessInput | None) -> None:
    which = data.input if data is not None else None
    if which is None:
        raise ConnectError(Code.UNIMPLEMENTED, "invalid input type")
    if which.field == "pty":
        await handle.write_pty(which.value)
    else:
        await handle.write_stdin(which.value)


def _start_error(request: SpawnRequest, exc: SpawnError) -> str:
    if request.pty_size is not None:
        cols, rows = request.pty_size
        return (
            f"error starting pty with command '{request.cmd}' in dir '{request.cwd}' "
            f"with '{cols}' cols and '{rows}' rows: {exc}"
        )
    return f"error starting process '{' '.join([request.cmd, *request.args])}': {exc}"
