"""The node service's operations as JSON (sandboxd.node.http_api serves them, sandboxd.node.remote
calls them): values encoded and decoded by their type annotations, generically over dataclasses
(sandboxd.node.models, the store's MetricSample and SandboxRow), so that a field added to a model crosses
without a change here. A domain error crosses as {"code": its sandboxd.errors class name,
"message", and its own attributes}, and is raised again as that class.

Decoding is strict about what it needs and lenient about the rest: a missing field without a
default, or a value of the wrong shape, raises WireError; a field it does not know is ignored
(a newer peer's)."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any, TypeVar, Union, cast

from sandboxd import errors
from sandboxd.errors import SandboxError
from sandboxd.node.models import LogEntry, SandboxConfig, SandboxInfo, SnapshotInfo
from sandboxd.node.service import NodeAgentService, NodeVolumes
from sandboxd.store.rows import MetricSample, SandboxRow, VolumeRow

T = TypeVar("T")

PREFIX = "/node/v1/"
# The volumes' content API on a node, as sandboxd.api.volume_content serves it on serve's port
# under /volumecontent/: a gateway relays its requests there.
CONTENT_PREFIX = PREFIX + "volumecontent/"
# The names the node service's annotations use (sandboxd.node.service imports them only for
# type checking), for resolving them at run time.
_NAMES = {c.__name__: c for c in (SandboxConfig, SandboxInfo, SnapshotInfo, LogEntry,
                                  MetricSample, SandboxRow, VolumeRow, SandboxError)}  # fmt: skip
_SCALARS = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}
_FIELDS: dict[type[Any], tuple[tuple[dataclasses.Field[Any], Any], ...]] = {}


class WireError(ValueError):
    """A JSON value that is not what its annotation says."""


def operations(*protocols: type) -> dict[str, inspect.Signature]:
    """Each operation of `protocols` (by default NodeAgentService's and NodeVolumes'; the
    builds' are sandboxd.node.builds.NodeBuilds) by name (its route's last part) and its
    signature, annotations resolved, `self` left out."""
    found = {}
    members = [m for p in protocols or (NodeAgentService, NodeVolumes)
               for m in inspect.getmembers(p, inspect.isfunction)]  # fmt: skip
    for name, method in members:
        if name.startswith("_"):
            continue
        hints = typing.get_type_hints(method, localns=_NAMES)
        signature = inspect.signature(method)
        params = list(signature.parameters.values())[1:]  # after self
        found[name] = signature.replace(
            parameters=[p.replace(annotation=hints[p.name]) for p in params],
            return_annotation=hints["return"],
        )
    return found


def encode(value: object) -> Any:
    """`value` as JSON: dataclasses as objects of their fields, tuples as arrays, a domain
    error as {"error": ...}."""
    if isinstance(value, SandboxError):
        return {"error": encode_error(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode(kind: Any, value: Any) -> Any:
    """`value` (JSON) as an instance of the annotation `kind`.

    Raises:
        WireError: it is not one.
    """
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        return _decode_union(typing.get_args(kind), value)
    if kind is Any or kind is object:
        return value
    if kind is type(None):
        return _checked(value, value is None, kind)
    if origin in (list, tuple, dict):
        return _decode_container(origin, typing.get_args(kind), value)
    if dataclasses.is_dataclass(kind):
        return decode_dataclass(cast("type[Any]", kind), value)
    return _checked(value, type(value) in _SCALARS.get(kind, (kind,)), kind)


def decode_dataclass(cls: type[T], value: Any) -> T:
    """Raises WireError: `value` is not an object of `cls`'s fields."""
    if not isinstance(value, dict):
        raise WireError(f"{cls.__name__}: expected an object")
    given = {}
    for f, kind in _fields(cls):
        if f.name in value:
            given[f.name] = decode(kind, value[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise WireError(f"{cls.__name__}: {f.name} is missing")
    return cls(**given)


def _fields(cls: type[Any]) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """The dataclass's fields and their resolved annotations, resolved once per class (the
    annotations are strings: resolving them evaluates each, on every value otherwise)."""
    known = _FIELDS.get(cls)
    if known is None:
        hints = typing.get_type_hints(cls)
        known = _FIELDS[cls] = tuple((f, hints[f.name]) for f in dataclasses.fields(cls))
    return known


def encode_error(exc: SandboxError) -> dict[str, Any]:
    """{"code", "message"} and the error's own attributes (InitRefused's `too_large`)."""
    extra = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool))}
    return {**extra, "code": type(exc).__name__, "message": str(exc)}


def decode_error(body: dict[str, Any]) -> SandboxError:
    """The sandboxd.errors class `body` names, with its message and attributes; a code that
    names none is a plain SandboxError."""
    cls = getattr(errors, str(body.get("code")), None)
    if not (isinstance(cls, type) and issubclass(cls, SandboxError)):
        cls = SandboxError
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(body.get("message", "")))
    for key, value in body.items():
        if key not in ("code", "message"):
            setattr(exc, key, value)
    return exc


def _decode_union(kinds: tuple[Any, ...], value: Any) -> Any:
    if value is None and type(None) in kinds:
        return None
    if SandboxError in kinds and isinstance(value, dict) and "error" in value:
        return decode_error(value["error"])
    last = WireError("no type of the union fits")
    for kind in kinds:
        if kind is not type(None) and kind is not SandboxError:
            try:
                return decode(kind, value)
            except WireError as exc:
                last = exc
    raise last


def _decode_container(origin: type, args: tuple[Any, ...], value: Any) -> Any:
    if origin is dict:
        _checked(value, isinstance(value, dict), dict)
        return {decode(args[0], k): decode(args[1], v) for k, v in value.items()} if args else value
    _checked(value, isinstance(value, list), origin)
    if origin is tuple:
        if len(args) != len(value):
            raise WireError(f"expected {len(args)} items, got {len(value)}")
        return tuple(decode(a, v) for a, v in zip(args, value, strict=True))
    return [decode(args[0], v) for v in value] if args else value


def _checked(value: Any, fits: bool, kind: Any) -> Any:
    if not fits:
        raise WireError(f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value
