"""Bounded fuzz run over the Connect JSON bodies of the Filesystem and Process RPCs: unary calls
(POST and GET) and the first envelopes of streams, against the sandboxed envd (conftest.py).

Each example is a short sequence of calls on a fresh sandbox, so calls meet each other's files
and processes. Paths stay inside the sandbox; Start runs only fixed harmless commands.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings, strategies as st

from tests.fuzz.safety import FuzzRequest
from tests.fuzz.strategies import (
    FUZZ_SETTINGS,
    auth_headers,
    base64_fields,
    envelope,
    enveloped,
    fixed_args,
    json_bytes,
    json_values,
    message_bodies,
    optional_fields,
    path_field,
    scalars,
    stream_requests,
    uint32ish,
    unary_requests,
)

if TYPE_CHECKING:
    from tests.fuzz.conftest import FuzzRun
    from tests.fuzz.safety import Confinement

# Root: the sandbox needs useradd. The timeout leaves room to shrink a failure (a daemon
# restart per crashing attempt); a passing run takes seconds.
pytestmark = [pytest.mark.root, pytest.mark.timeout(900)]

FILESYSTEM = "/filesystem.Filesystem/"
PROCESS = "/process.Process/"
# A process that stays alive for the calls of an example to act on: `cat`, tagged.
LIVE_TAG = "live"
flags = st.one_of(st.booleans(), scalars)


# Built once per sandbox: hypothesis validates a strategy on first use, which costs far more
# than drawing from it.
@functools.cache
def filesystem_calls(conf: Confinement) -> st.SearchStrategy[FuzzRequest]:
    path = path_field(conf)
    watcher = optional_fields(
        path=path, recursive=flags, includeEntry=flags, allow_network_mounts=flags
    )
    watcher_id = optional_fields(watcherId=st.text(max_size=12) | scalars, watcher_id=scalars)
    unary: dict[str, st.SearchStrategy[Any]] = {
        "Stat": optional_fields(path=path),
        "MakeDir": optional_fields(path=path),
        "Move": optional_fields(source=path, destination=path),
        "ListDir": optional_fields(path=path, depth=uint32ish),
        "Remove": optional_fields(path=path),
        "CreateWatcher": watcher,
        "GetWatcherEvents": watcher_id,
        "RemoveWatcher": watcher_id,
    }
    calls = [unary_requests(conf, FILESYSTEM + name, fields) for name, fields in unary.items()]
    # WatchDir runs until cancelled: its answer is read up to the first message.
    calls.append(stream_requests(conf, FILESYSTEM + "WatchDir", watcher, read_whole=False))
    return st.one_of(calls)


def _selector() -> st.SearchStrategy[Any]:
    return optional_fields(
        pid=uint32ish, tag=st.sampled_from([LIVE_TAG, LIVE_TAG, "", "nope"]) | scalars
    )


def _pty() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), scalars, optional_fields(size=optional_fields(cols=uint32ish, rows=uint32ish))
    )


def _start_fields(conf: Confinement) -> st.SearchStrategy[Any]:
    envs = st.one_of(
        st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3), json_values
    )
    config = st.fixed_dictionaries(
        {"cmd": st.sampled_from(["true", "echo"])},
        optional={"args": fixed_args(), "envs": envs, "cwd": path_field(conf)},
    )
    return optional_fields(
        process=config, pty=_pty(), tag=st.text(max_size=8) | scalars, stdin=flags
    )


@functools.cache
def process_calls(conf: Confinement) -> st.SearchStrategy[FuzzRequest]:
    selector = _selector()
    process_input = optional_fields(stdin=base64_fields(), pty=base64_fields())
    unary: dict[str, st.SearchStrategy[Any]] = {
        "List": optional_fields(),
        "Update": optional_fields(process=selector, pty=_pty()),
        "SendInput": optional_fields(process=selector, input=process_input),
        "SendSignal": optional_fields(
            process=selector,
            signal=st.sampled_from(
                ["SIGNAL_SIGTERM", "SIGNAL_SIGKILL", "SIGNAL_UNSPECIFIED", "SIGINT"]
            )
            | uint32ish,
        ),
        "CloseStdin": optional_fields(process=selector),
    }
    calls = [unary_requests(conf, PROCESS + name, fields) for name, fields in unary.items()]
    calls += [
        stream_requests(conf, PROCESS + "Start", _start_fields(conf), read_whole=True),
        stream_requests(
            conf, PROCESS + "Connect", optional_fields(process=selector), read_whole=False
        ),
        stream_input_calls(conf, selector, process_input),
    ]
    return st.one_of(calls)


def stream_input_calls(
    conf: Confinement, selector: st.SearchStrategy[Any], process_input: st.SearchStrategy[Any]
) -> st.SearchStrategy[FuzzRequest]:
    """A client stream: a damaged or plain first envelope, then a few plain ones."""
    event = st.one_of(
        st.fixed_dictionaries({"start": optional_fields(process=selector)}),
        st.fixed_dictionaries({"data": optional_fields(input=process_input)}),
        st.just({"keepalive": {}}),
        optional_fields(start=scalars, data=scalars),
    )
    return st.builds(
        lambda first, rest, auth: FuzzRequest(
            "POST",
            PROCESS + "StreamInput",
            headers=(("Content-Type", "application/connect+json"), *first[1], *auth),
            body=first[0] + b"".join(envelope(0, payload) for payload in rest),
        ),
        enveloped(message_bodies(event)),
        st.lists(json_bytes(event), max_size=3),
        auth_headers(conf),
    )


def live_process() -> FuzzRequest:
    """Start `cat` under the live tag; its answer is read up to the start event."""
    body = b'{"process":{"cmd":"cat"},"tag":"' + LIVE_TAG.encode() + b'","stdin":true}'
    return FuzzRequest(
        "POST",
        PROCESS + "Start",
        headers=(("Content-Type", "application/connect+json"), ("X-Access-Token", "fuzz-token")),
        body=envelope(0, body),
        read_whole_stream=False,
    )


@settings(FUZZ_SETTINGS, max_examples=400)
@given(data=st.data())
def test_filesystem_rpcs(fuzz: FuzzRun, data: st.DataObject) -> None:
    fuzz.run(data.draw(st.lists(filesystem_calls(fuzz.conf), min_size=1, max_size=4)))


@settings(FUZZ_SETTINGS, max_examples=250)
@given(data=st.data())
def test_process_rpcs(fuzz: FuzzRun, data: st.DataObject) -> None:
    calls = data.draw(st.lists(process_calls(fuzz.conf), min_size=1, max_size=4))
    fuzz.run([live_process(), *calls])
