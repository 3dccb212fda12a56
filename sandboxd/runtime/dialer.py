"""How anything above the runtime reaches a port inside a sandbox, whatever engine runs it: the
guest client's connections to envd, the readiness probe, the proxy's upstream connections. The
nspawn engine's dialer makes sockets in the container's network namespace
(sandboxd.host.netns); another engine's could dial a VM's address or a vsock."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    import asyncio
    import socket
    from collections.abc import Awaitable, Callable


class Dialer(Protocol):
    async def connect(self, port: int) -> socket.socket:
        """A connected, non-blocking TCP socket to `port` on the sandbox's own loopback.

        Raises:
            OSError: nothing listens there, or the sandbox is gone.
        """
        ...

    async def open_connection(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """`connect` as asyncio streams. Raises OSError as `connect`."""
        ...


# Whether the sandbox's guest agent serves yet: the runtime polls it during a boot. The guest
# package supplies it (sandboxd.guest); the runtime knows nothing of what answers.
ReadinessProbe: TypeAlias = "Callable[[Dialer], Awaitable[bool]]"
