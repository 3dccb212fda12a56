"""The process service's own codecs (envd/process/codecs.py): data events written by hand must be
exactly what protobuf-py writes, and large coalesced events must survive both wire formats."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from connectrpc.codec import proto_binary_codec, proto_json_codec

from envd._gen.process.process_connect import ProcessClientSync
from envd._gen.process.process_pb import ConnectResponse, ProcessEvent, StartResponse
from envd.process.codecs import OutputJSONCodec, OutputProtoCodec
from envd.process.streams import MAX_EVENT_BYTES, data_event, end_of, start_event
from tests.process.client import children_of, collect, shell
from tests.waiting import wait_until

if TYPE_CHECKING:
    from connectrpc.codec import Codec

    from tests.envd_process import EnvdProcess

# Lengths around every varint width the three nested length prefixes can take.
SIZES = [0, 1, 2, 125, 126, 127, 128, 129, 16_381, 16_383, 16_384, 16_385, 2_097_151, 2_097_152]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["stdout", "stderr", "pty"])
@pytest.mark.parametrize("response", [StartResponse, ConnectResponse])
def test_data_events_are_encoded_exactly_as_protobuf_py_does(
    size: int, kind: str, response: type[StartResponse | ConnectResponse]
) -> None:
    payload = bytes(i * 7 % 251 for i in range(size))
    message = response(event=data_event(kind, payload))  # type: ignore[arg-type]
    assert OutputProtoCodec().encode(message) == message.to_binary()
    assert OutputJSONCodec().encode(message) == message.to_json().encode()


@pytest.mark.parametrize(
    "event",
    [
        start_event(42),
        end_of(ProcessEvent.EndEvent(exit_code=-1, exited=False, status="x", error="x")),
        ProcessEvent(),
    ],
)
def test_other_messages_go_to_the_stock_codecs(event: ProcessEvent) -> None:
    message = StartResponse(event=event)
    assert OutputProtoCodec().encode(message) == message.to_binary()
    assert OutputJSONCodec().encode(message) == message.to_json().encode()
    decoded = OutputProtoCodec().decode(message.to_binary(), StartResponse)
    assert decoded == message


def _output_piled_up(pid: int) -> bool:
    """Whether the command (or the child writing for it) waits on a full pipe: envd has stopped
    reading, its reads will find the pipe full. Exited counts too: everything waits in envd."""
    try:
        writers = [pid, *children_of(pid)]
        return any("pipe_write" in Path(f"/proc/{w}/wchan").read_text() for w in writers)
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("codec", [proto_binary_codec(), proto_json_codec()], ids=["proto", "json"])
def test_a_slow_reader_gets_large_events_with_every_byte(envd: EnvdProcess, codec: Codec) -> None:
    # The client waits before reading, so output piles up and leaves as merged events.
    script = "seq 1 600000; seq 1 50000 >&2"
    with ProcessClientSync(envd.url, codec=codec, send_compression=None) as client:
        responses = iter(client.start(shell(script)))
        first = next(responses)
        assert first.event is not None
        assert isinstance(first.event.event.value, ProcessEvent.StartEvent)  # type: ignore[union-attr]
        pid = first.event.event.value.pid  # type: ignore[union-attr]
        wait_until(lambda: _output_piled_up(pid), 30, "the command to block on a full pipe")
        rest = list(responses)
    sizes = [
        len(response.event.event.value.output.value)  # type: ignore[union-attr]
        for response in rest
        if response.event is not None
        and response.event.event is not None
        and response.event.event.field == "data"
    ]
    run = collect([first, *rest])
    assert run.stdout == "".join(f"{i}\n" for i in range(1, 600_001)).encode()
    assert run.stderr == "".join(f"{i}\n" for i in range(1, 50_001)).encode()
    assert max(sizes) > 32 * 1024  # merged reads, framed by the hand-written path
    assert max(sizes) <= MAX_EVENT_BYTES
