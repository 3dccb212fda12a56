"""The numbers of envd's HTTP/1.1 connection policy (connection.py), and the hidden environment
variables through which tests shorten them (not supported settings)."""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("envd.connection")

# Go net/http's DefaultMaxHeaderBytes, which the reference envd runs with.
MAX_HEADER_BYTES: Final = 1 << 20
HEADER_TIMEOUT_S: Final = 30.0
# A body read whole (at most 4 MiB) must arrive within this; the SDKs give up on a request
# after 60 s by default, so a client that is still sending by then has given up itself.
BODY_TIMEOUT_S: Final = 60.0
# A streamed body (upload, StreamInput) may take any time while data flows; one that carries
# nothing for as long as an idle keep-alive connection may live is dropped like one.
BODY_IDLE_TIMEOUT_S: Final = 640.0
# Half of the descriptors go to connections, the rest stays for envd's own work: the files
# being transferred, process pipes and PTYs, inotify instances, pidfds.
CONNECTION_SHARE_OF_DESCRIPTORS: Final = 2

NO_CONNECTION_CAP: Final = 1 << 30
REFUSAL_LOG_INTERVAL_S: Final = 10.0

# (method, path) of the requests whose body is a stream rather than one message.
STREAMING_BODIES: Final = frozenset({("POST", "/files"), ("POST", "/process.Process/StreamInput")})


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_header_bytes: int = MAX_HEADER_BYTES
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    body_idle_timeout_s: float = BODY_IDLE_TIMEOUT_S
    max_connections: int = NO_CONNECTION_CAP

    @classmethod
    def from_environment(cls) -> ConnectionLimits:
        """The defaults, with the connection cap taken from RLIMIT_NOFILE, unless a test
        overrides them through ENVD_HEADER_TIMEOUT_S, ENVD_BODY_TIMEOUT_S,
        ENVD_BODY_IDLE_TIMEOUT_S or ENVD_MAX_CONNECTIONS."""
        return cls(
            max_header_bytes=MAX_HEADER_BYTES,
            header_timeout_s=env_number("ENVD_HEADER_TIMEOUT_S", HEADER_TIMEOUT_S),
            body_timeout_s=env_number("ENVD_BODY_TIMEOUT_S", BODY_TIMEOUT_S),
            body_idle_timeout_s=env_number("ENVD_BODY_IDLE_TIMEOUT_S", BODY_IDLE_TIMEOUT_S),
            max_connections=int(env_number("ENVD_MAX_CONNECTIONS", descriptor_connection_cap())),
        )


def descriptor_connection_cap() -> int:
    """How many connections may be open at once, from the soft RLIMIT_NOFILE.

    The soft limit is not raised to the hard one (Go does so since 1.19): children would then
    inherit the raised limit, which Go undoes in each child and our two spawn paths do not.
    The shipped unit sets both limits to 1048576.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:  # Linux never allows it; other kernels might
        return NO_CONNECTION_CAP
    return max(1, soft // CONNECTION_SHARE_OF_DESCRIPTORS)


def env_number(name: str, default: float) -> float:
    """A hidden numeric setting from the environment (tests shorten limits with them)."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, value)
        return default


def plain_response(status: bytes, message: bytes) -> bytes:
    """A complete response that ends the connection, written by the connection's protocol
    itself, before or instead of the app's."""
    return (
        b"HTTP/1.1 %s\r\n"
        b"content-type: text/plain; charset=utf-8\r\n"
        b"connection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (status, len(message), message)
    )


class RefusalLog:
    """Counts refused connections and logs them to `logger` at most every
    REFUSAL_LOG_INTERVAL_S: a flood must not flood the log too."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.unlogged = 0
        self.last_logged = float("-inf")

    def refused(self, open_connections: int) -> None:
        self.unlogged += 1
        now = time.monotonic()
        if now - self.last_logged >= REFUSAL_LOG_INTERVAL_S:
            self.logger.warning(
                "refused %d connection(s): %d already open", self.unlogged, open_connections
            )
            self.unlogged = 0
            self.last_logged = now
