"""The node service's wire codec (sandboxd.node.wire): every operation's arguments and results
survive JSON as they went in, by their annotations alone; a value of the wrong shape is refused
naming what is wrong; domain errors come back as their own class with their attributes."""

from __future__ import annotations

import json

import pytest

from sandboxd.errors import InitRefused, SandboxError, SandboxNotFound
from sandboxd.node import wire
from sandboxd.node.models import LogEntry, SandboxConfig, SandboxInfo
from sandboxd.store.rows import MetricSample

INFO = SandboxInfo("s1", "base", None, "running", True, 1, 2, 2, 512, 0, "0.1", False,
                   {"k": "v"}, {"network": {"allowOut": ["1.1.1.1"]}}, "tok", None)  # fmt: skip


def _through(kind: object, value: object) -> object:
    return wire.decode(kind, json.loads(json.dumps(wire.encode(value))))


def test_every_operation_is_named_with_its_annotations() -> None:
    operations = wire.operations()
    assert {"create", "kill", "connect", "fork", "logs", "metrics", "get"} <= set(operations)
    assert list(operations["logs"].parameters) == [
        "sandbox_id", "since_us", "until_us", "limit", "newest_first"
    ]  # fmt: skip


def test_results_come_back_as_they_went_in() -> None:
    returns = {n: s.return_annotation for n, s in wire.operations().items()}
    assert _through(returns["create"], INFO) == INFO
    assert _through(returns["connect"], (INFO, True)) == (INFO, True)
    assert _through(returns["get"], None) is None
    sample = MetricSample(1, 2, 3.5, 4, 5, 6, 7, 8)
    assert _through(returns["metrics"], [sample]) == [sample]
    assert _through(returns["logs"], [LogEntry(1, "info", "envd", "hi")]) == [
        LogEntry(1, "info", "envd", "hi")
    ]
    forked = _through(returns["fork"], [INFO, SandboxNotFound("x")])
    assert isinstance(forked, list)
    assert forked[0] == INFO
    assert isinstance(forked[1], SandboxNotFound)


def test_arguments_with_defaults_may_be_left_out() -> None:
    config = wire.decode(SandboxConfig, {"template": "base", "timeout_s": 5, "secure": True,
                                         "auto_pause": False, "unknown": 1})  # fmt: skip
    assert config == SandboxConfig("base", 5, True, False)


@pytest.mark.parametrize("value", [{"template": "base"}, {"template": 3, "timeout_s": 5,
                                   "secure": True, "auto_pause": False}, [], "x"])  # fmt: skip
def test_a_value_of_the_wrong_shape_is_refused(value: object) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(SandboxConfig, value)


def test_a_bool_is_no_int_and_an_int_is_a_float() -> None:
    with pytest.raises(wire.WireError):
        wire.decode(int, True)
    assert wire.decode(float, 3) == 3


def test_errors_keep_their_class_message_and_attributes() -> None:
    back = wire.decode_error(json.loads(json.dumps(wire.encode_error(
        InitRefused("too big", too_large=True)))))  # fmt: skip
    assert isinstance(back, InitRefused)
    assert (str(back), back.too_large) == ("too big", True)
    unknown = wire.decode_error({"code": "NoSuchClass", "message": "m"})
    assert type(unknown) is SandboxError
    not_an_error = wire.decode_error({"code": "Path", "message": "m"})
    assert type(not_an_error) is SandboxError
