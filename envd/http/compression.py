"""gzip for GET /files: whether a file is worth compressing, and a compressor fast enough that
a read is not CPU-bound.

The reference gzips every read whose client accepts gzip, with Go's compress/gzip at level 6
(25-40 MiB/s of one core here), and the Python SDK's HTTP client accepts gzip on every read, so
SDK reads ran at that rate whatever the file held. envd instead
- sends a file that does not compress (already compressed, encrypted or random data) as
  identity, judged from samples, unless the client rejects identity;
- compresses with ISA-L's igzip (python-isal) at its level 3: 4.8x the speed of zlib level 6,
  for a body 15-18% larger on source text. igzip's level 2 is 2.5x faster again but 20%
  larger; zlib-ng's level 3 is 8% larger but only 3x zlib's speed.
"""

from __future__ import annotations

import os
from typing import Final

from isal import isal_zlib

GZIP_LEVEL: Final = 3
# Below this size a file is gzipped whatever it holds, as the reference does: compressing it
# costs under a millisecond, about what sampling it would.
ALWAYS_GZIP_BELOW: Final = 64 * 1024
SAMPLE_COUNT: Final = 8
SAMPLE_BYTES: Final = 32 * 1024
# Samples compressed at igzip's fastest level to at most this share of their size mean the file
# compresses. Compressed formats, encrypted and random data land near 1.0; text, source, logs,
# JSON and executables at 0.2-0.5.
COMPRESSIBLE_RATIO: Final = 0.9
_SAMPLE_LEVEL: Final = 1


def gzip_compressor() -> isal_zlib.Compress:
    """A streaming compressor that writes a gzip member (header, deflate, CRC-32 trailer).

    Its compress and flush release the GIL: call them from a worker thread, one at a time
    (but for a small body, where the thread's round trip would cost more than compressing).
    """
    return isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)


def worth_compressing(fd: int, size: int) -> bool:
    """Whether the first `size` bytes of `fd` compress: always below ALWAYS_GZIP_BELOW (at
    once, reading nothing), else judged from SAMPLE_COUNT samples spread evenly over them (the
    first and last included), which blocks: then run it in a worker thread."""
    if size < ALWAYS_GZIP_BELOW:
        return True
    raw = compressed = 0
    for index in range(SAMPLE_COUNT):
        offset = (size - SAMPLE_BYTES) * index // (SAMPLE_COUNT - 1)
        sample = os.pread(fd, SAMPLE_BYTES, offset)
        raw += len(sample)
        compressed += len(isal_zlib.compress(sample, _SAMPLE_LEVEL))
    return compressed <= raw * COMPRESSIBLE_RATIO
