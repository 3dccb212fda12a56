"""Sockets inside a sandbox's network namespace, made with setns: the host routes nothing to a
sandbox, and only code holding a `NetNamespace` can reach `127.0.0.1:PORT` inside it.

setns moves only the calling thread, and a socket keeps the namespace it was created in, so
`socket()` switches, creates and switches back synchronously (microseconds) on whatever thread
calls it, the event loop's included. (docs/sandboxd.md, "How a sandbox runs")
"""

from __future__ import annotations

import asyncio
import os
import socket

from sandboxd.host import libc

LOOPBACK = "127.0.0.1"


class NetNamespace:
    """A pinned network namespace: the fd keeps it alive until `close()`, even if the process
    it came from exits."""

    def __init__(self, pid: int) -> None:
        """Pin the network namespace of process `pid`.

        Raises:
            OSError: the process is gone (ENOENT) or not ours to enter (EACCES).
        """
        self._fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.inode = os.fstat(self._fd).st_ino

    def new_socket(
        self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM
    ) -> socket.socket:
        """A new socket that lives in this namespace.

        Raises:
            OSError: the namespace is closed, or setns failed.
        """
        if self._fd < 0:
            raise OSError("network namespace already closed")
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            libc.setns(self._fd, libc.CLONE_NEWNET)
            try:
                return socket.socket(family, kind)
            finally:
                # Failing to switch back would leave this thread (maybe the event loop's)
                # talking from inside a sandbox: nothing sane can continue after that.
                try:
                    libc.setns(own, libc.CLONE_NEWNET)
                except OSError:
                    os.abort()
        finally:
            os.close(own)

    async def connect(self, port: int, host: str = LOOPBACK) -> socket.socket:
        """A non-blocking TCP socket connected to `host:port` inside the namespace.

        Raises:
            OSError: the connection was refused or failed.
        """
        sock = self.new_socket()
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return sock

    async def open_connection(
        self, port: int, host: str = LOOPBACK, limit: int = 2**16
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """asyncio streams over a connection to `host:port` inside the namespace.

        Raises:
            OSError: the connection was refused or failed.
        """
        sock = await self.connect(port, host)
        try:
            return await asyncio.open_connection(sock=sock, limit=limit)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
