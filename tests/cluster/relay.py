"""A TCP relay of the networked rig (tests/cluster/netrig.py): `python -m tests.cluster.relay
FD:PORT...` accepts on each listening socket it inherited as FD (made by the rig in another
network namespace: the host's, or a node's) and joins every connection to 127.0.0.1:PORT of the
namespace it runs in. Nothing of either namespace is routed to the other: only these ports cross.
It runs until its pid is signalled."""

from __future__ import annotations

import asyncio
import functools
import socket
import sys

CHUNK = 1 << 16


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
) -> None:
    """Copy `reader` to `writer` until its end, then half-close `writer` (HTTP clients may
    half-close after a request and still read the answer). A reset of either side (`source`
    is `reader`'s connection) resets the other too: a proxy that cuts a connection is seen to."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.transport.abort()
        source.transport.abort()


async def _relay(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        far_reader, far_writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:  # nothing listens there (yet): the client sees its connection closed
        writer.close()
        return
    try:
        await asyncio.gather(
            _pump(reader, far_writer, writer), _pump(far_reader, writer, far_writer)
        )
    finally:
        far_writer.close()
        writer.close()


async def _serve(pairs: list[tuple[int, int]]) -> None:
    for fd, port in pairs:
        listener = socket.socket(fileno=fd)
        await asyncio.start_server(functools.partial(_relay, port), sock=listener)
    await asyncio.Event().wait()  # until signalled


def main(argv: list[str]) -> None:
    pairs = [(int(fd), int(port)) for fd, port in (arg.split(":") for arg in argv)]
    asyncio.run(_serve(pairs))


if __name__ == "__main__":
    main(sys.argv[1:])
