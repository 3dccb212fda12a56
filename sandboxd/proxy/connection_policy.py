"""The connection policy of sandboxd's one port (envd's, envd/connection.py, for the same
reasons): a request's head must arrive within HEADER_TIMEOUT_S of its first byte, a control
API body within BODY_TIMEOUT_S of its head (a streamed one, `streamed_prefixes`, such as a
volume upload: with no more than BODY_TIMEOUT_S between its bytes), and open connections are capped below the
descriptor limit; at the cap a new connection evicts one that has sent nothing for a second
while waiting for a request, or is refused with a 503. Before it, 2000 connections sending a
byte every 5 s were all held (and the limit, 20000 descriptors, was within reach of one
client). Proxied bodies (uploads, process input) stream for as long as they take.

The numbers may be shortened for tests through SANDBOXD_HEADER_TIMEOUT_S,
SANDBOXD_BODY_TIMEOUT_S and SANDBOXD_MAX_CONNECTIONS (not supported settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from envd.connection_limits import descriptor_connection_cap, env_number, plain_response

HEADER_TIMEOUT_S: Final = 30.0
# The SDKs give up on a control request after 60 s by default.
BODY_TIMEOUT_S: Final = 60.0
EVICTABLE_AFTER_IDLE_S: Final = 1.0


TOO_SLOW: Final = plain_response(b"408 Request Timeout", b"408 Request Timeout")
TOO_MANY: Final = plain_response(
    b"503 Service Unavailable", b"503 Service Unavailable: too many open connections"
)


@dataclass(frozen=True)
class ConnectionPolicy:
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = 1 << 30
    # Control API paths whose bodies are files of any size: the body deadline restarts with
    # each piece of them that arrives.
    streamed_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls) -> ConnectionPolicy:
        return cls(
            env_number("SANDBOXD_HEADER_TIMEOUT_S", HEADER_TIMEOUT_S),
            env_number("SANDBOXD_BODY_TIMEOUT_S", BODY_TIMEOUT_S),
            int(env_number("SANDBOXD_MAX_CONNECTIONS", descriptor_connection_cap())),
        )
