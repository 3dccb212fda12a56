"""SendInput, StreamInput, CloseStdin, SendSignal, Update and PTYs: routing, errors, sizes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

import anyio
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.codec import proto_json_codec
from connectrpc.errors import ConnectError
from protobuf import Oneof

from envd._gen.process.process_connect import ProcessClient
from envd._gen.process.process_pb import (
    PTY,
    CloseStdinRequest,
    ProcessInput,
    ProcessSelector,
    SendInputRequest,
    SendSignalRequest,
    Signal,
    StartRequest,
    StreamInputRequest,
    UpdateRequest,
)
from envd.process.streams import MAX_EVENT_BYTES
from tests.process.client import Run, by_pid, pty_input, shell, stdin_input, with_pty

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.anyio


class Started:
    """A started process whose stream is read in the background."""

    def __init__(self, stream: AsyncIterator[object]) -> None:
        self.stream = stream
        self.run = Run()

    async def pid(self) -> int:
        self.run.add((await anext(self.stream)).event)  # type: ignore[attr-defined]
        return self.run.pid

    async def finish(self) -> Run:
        with anyio.fail_after(20):
            async for response in self.stream:
                self.run.add(response.event)  # type: ignore[attr-defined]
        return self.run


async def _start(client: ProcessClient, request: StartRequest) -> tuple[Started, ProcessSelector]:
    started = Started(client.start(request))
    return started, by_pid(await started.pid())


async def _expect(code: Code, message: str, call: object) -> None:
    with pytest.raises(ConnectError) as caught:
        await call  # type: ignore[misc]
    assert (caught.value.code, caught.value.message) == (code, message)


async def test_send_input_then_close_stdin(client: ProcessClient) -> None:
    # stays alive a moment after EOF, so the second CloseStdin still finds it
    started, me = await _start(client, shell("cat; sleep 0.3", stdin=True))
    await client.send_input(SendInputRequest(process=me, input=stdin_input(b"one ")))
    await client.send_input(SendInputRequest(process=me, input=stdin_input(b"two")))
    await client.close_stdin(CloseStdinRequest(process=me))
    await client.close_stdin(CloseStdinRequest(process=me))  # idempotent
    run = await started.finish()
    assert run.stdout == b"one two"
    assert run.end is not None
    assert run.end.exit_code == 0


async def test_large_input_waits_for_the_reader(client: ProcessClient) -> None:
    started, me = await _start(client, shell("sleep 0.3; wc -c"))
    await client.send_input(SendInputRequest(process=me, input=stdin_input(b"x" * 1_000_000)))
    await client.close_stdin(CloseStdinRequest(process=me))
    assert (await started.finish()).stdout.strip() == b"1000000"


async def test_stream_input_in_order(client: ProcessClient) -> None:
    started, me = await _start(client, shell("cat"))

    async def messages() -> AsyncIterator[StreamInputRequest]:
        start: Oneof[Literal["start"], StreamInputRequest.StartEvent]
        start = Oneof("start", StreamInputRequest.StartEvent(process=me))
        yield StreamInputRequest(event=start)
        for i in range(50):
            data: Oneof[Literal["data"], StreamInputRequest.DataEvent]
            data = Oneof("data", StreamInputRequest.DataEvent(input=stdin_input(f"{i},".encode())))
            yield StreamInputRequest(event=data)
            if i == 25:
                keepalive: Oneof[Literal["keepalive"], StreamInputRequest.KeepAlive]
                keepalive = Oneof("keepalive", StreamInputRequest.KeepAlive())
                yield StreamInputRequest(event=keepalive)

    await client.stream_input(messages())
    await client.close_stdin(CloseStdinRequest(process=me))
    assert (await started.finish()).stdout == "".join(f"{i}," for i in range(50)).encode()


async def test_slow_stream_input_outlives_the_body_deadline(
    envd_factory: Callable[..., EnvdProcess],
) -> None:
    # Bodies read whole get 1 s here (60 s in production); StreamInput is a stream, which
    # stays open while data flows.
    daemon = envd_factory(env={"ENVD_BODY_TIMEOUT_S": "1"})
    async with ProcessClient(daemon.url, codec=proto_json_codec(), send_compression=None) as c:
        started, me = await _start(c, shell("cat"))

        async def messages() -> AsyncIterator[StreamInputRequest]:
            start: Oneof[Literal["start"], StreamInputRequest.StartEvent]
            start = Oneof("start", StreamInputRequest.StartEvent(process=me))
            yield StreamInputRequest(event=start)
            for i in range(6):
                await anyio.sleep(0.4)
                data: Oneof[Literal["data"], StreamInputRequest.DataEvent]
                data = Oneof("data", StreamInputRequest.DataEvent(input=stdin_input(b"%d," % i)))
                yield StreamInputRequest(event=data)

        await c.stream_input(messages())
        await c.close_stdin(CloseStdinRequest(process=me))
        assert (await started.finish()).stdout == b"0,1,2,3,4,5,"


async def test_stream_input_data_before_start_is_rejected(client: ProcessClient) -> None:
    async def messages() -> AsyncIterator[StreamInputRequest]:
        data: Oneof[Literal["data"], StreamInputRequest.DataEvent]
        data = Oneof("data", StreamInputRequest.DataEvent(input=stdin_input(b"x")))
        yield StreamInputRequest(event=data)

    with pytest.raises(ConnectError) as caught:
        await client.stream_input(messages())
    assert caught.value.code == Code.FAILED_PRECONDITION


async def test_stream_input_unknown_process(client: ProcessClient) -> None:
    async def messages() -> AsyncIterator[StreamInputRequest]:
        start: Oneof[Literal["start"], StreamInputRequest.StartEvent]
        start = Oneof("start", StreamInputRequest.StartEvent(process=by_pid(999_999_999)))
        yield StreamInputRequest(event=start)

    await _expect(
        Code.NOT_FOUND, "process with pid 999999999 not found", client.stream_input(messages())
    )


async def test_input_routing_errors(client: ProcessClient) -> None:
    started, me = await _start(client, shell("sleep 30", stdin=False))
    try:
        await _expect(
            Code.INTERNAL,
            "error writing to stdin: stdin not enabled or closed",
            client.send_input(SendInputRequest(process=me, input=stdin_input(b"x"))),
        )
        await _expect(
            Code.INTERNAL,
            "error writing to tty: tty not assigned to process",
            client.send_input(SendInputRequest(process=me, input=pty_input(b"x"))),
        )
        await _expect(
            Code.UNIMPLEMENTED,
            "invalid input type",
            client.send_input(SendInputRequest(process=me, input=ProcessInput())),
        )
        await _expect(
            Code.INTERNAL,
            "error resizing tty: tty not assigned to process",
            client.update(UpdateRequest(process=me, pty=PTY(size=PTY.Size(cols=10, rows=10)))),
        )
        await client.update(UpdateRequest(process=me))  # no pty: nothing to do
        await client.close_stdin(CloseStdinRequest(process=me))  # disabled stdin: success
    finally:
        await client.send_signal(SendSignalRequest(process=me, signal=Signal.SIGTERM))
    run = await started.finish()
    assert run.end is not None
    assert run.end.status == "signal: terminated"


async def test_signal_and_selector_errors(client: ProcessClient) -> None:
    started, me = await _start(client, shell("sleep 30"))
    try:
        await _expect(
            Code.UNIMPLEMENTED,
            "invalid signal",
            client.send_signal(SendSignalRequest(process=me, signal=Signal.UNSPECIFIED)),
        )
    finally:
        await client.send_signal(SendSignalRequest(process=me, signal=Signal.SIGKILL))
    await started.finish()
    gone = SendSignalRequest(process=me, signal=Signal.SIGKILL)
    await _expect(
        Code.NOT_FOUND, f"process with pid {started.run.pid} not found", client.send_signal(gone)
    )
    empty = SendSignalRequest(process=ProcessSelector(), signal=Signal.SIGKILL)
    await _expect(Code.UNIMPLEMENTED, "invalid input type", client.send_signal(empty))
    await _expect(
        Code.NOT_FOUND,
        "process with pid 999999999 not found",
        client.close_stdin(CloseStdinRequest(process=by_pid(999_999_999))),
    )


async def test_pty_is_the_controlling_terminal(client: ProcessClient) -> None:
    started, _ = await _start(client, with_pty("/bin/sh", "-c", "tty; stty size"))
    run = await started.finish()
    lines = run.pty.decode().splitlines()
    assert re.fullmatch(r"/dev/pts/\d+", lines[0])
    assert lines[1] == "24 80"
    assert (run.stdout, run.stderr) == (b"", b"")


@pytest.mark.parametrize(("cols", "rows", "seen"), [(0, 0, "0 0"), (70_000, 65_537, "1 4464")])
async def test_pty_zero_and_absurd_sizes(
    client: ProcessClient, cols: int, rows: int, seen: str
) -> None:
    started, _ = await _start(client, with_pty("stty", "size", cols=cols, rows=rows))
    assert (await started.finish()).pty.decode().strip() == seen


async def test_pty_input_resize_and_ctrl_d(client: ProcessClient) -> None:
    started, me = await _start(
        client, with_pty("/bin/sh", "-c", "read x; stty size; echo got $x; cat")
    )
    await client.update(UpdateRequest(process=me, pty=PTY(size=PTY.Size(cols=120, rows=40))))
    await client.send_input(SendInputRequest(process=me, input=pty_input(b"hi\n")))
    await _expect(
        Code.UNKNOWN,
        "error closing stdin: cannot close stdin for PTY process — send Ctrl+D (0x04) instead",
        client.close_stdin(CloseStdinRequest(process=me)),
    )
    await _expect(
        Code.INTERNAL,
        "error writing to stdin: stdin not enabled or closed",
        client.send_input(SendInputRequest(process=me, input=stdin_input(b"x"))),
    )
    await client.send_input(SendInputRequest(process=me, input=pty_input(b"\x04")))
    run = await started.finish()
    assert b"40 120\r\ngot hi\r\n" in run.pty
    assert run.end is not None
    assert run.end.exit_code == 0


async def test_pty_output_whole_in_bounded_events(client: ProcessClient) -> None:
    started = Started(client.start(with_pty("head", "-c", "300000", "/dev/zero")))
    sizes = []
    with anyio.fail_after(20):
        async for response in started.stream:
            event = response.event.event  # type: ignore[attr-defined]
            if event.field == "data":
                sizes.append(len(event.value.output.value))
    assert sum(sizes) == 300_000
    assert max(sizes) <= MAX_EVENT_BYTES  # reads of 16 KiB, merged only for a lagging client


async def test_signal_number_outside_the_enum(envd: EnvdProcess, client: ProcessClient) -> None:
    started, me = await _start(client, shell("sleep 30"))
    try:
        async with httpx.AsyncClient(base_url=envd.url) as http:
            response = await http.post(
                "/process.Process/SendSignal",
                json={"process": {"pid": started.run.pid}, "signal": 2},  # SIGINT: not in the enum
            )
        assert response.status_code == 501
        assert response.json() == {"code": "unimplemented", "message": "invalid signal"}
    finally:
        await client.send_signal(SendSignalRequest(process=me, signal=Signal.SIGKILL))
    await started.finish()
