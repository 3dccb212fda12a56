"""The proxy's read buffer: reads a client's transport keeps queued share one bytearray, so
what they pin stays close to their size (a new 1 MiB per kept read let a slow client of a
stream of small events pin gigabytes)."""

from __future__ import annotations

from sandboxd.proxy.upstream import MIN_READ, READ_BUFFER, ReadBuffer


def test_kept_small_reads_share_one_bytearray() -> None:
    buffer = ReadBuffer()
    first = buffer.free()
    assert len(first) == READ_BUFFER
    kept = 200
    reads = [first[:kept]]
    while len(buffer.free()) - kept >= MIN_READ:
        buffer.keep(kept)
        reads.append(buffer.free()[:kept])
    assert len(reads) == (READ_BUFFER - MIN_READ) // kept + 1
    assert all(read.obj is first.obj for read in reads)  # one 1 MiB for all of them
    buffer.keep(kept)  # too little left for a useful read: new memory
    assert buffer.free().obj is not first.obj
    assert len(buffer.free()) == READ_BUFFER
