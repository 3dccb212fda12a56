"""Connect clients for the process service on the shared daemon (helpers: client.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from connectrpc.codec import proto_json_codec

from envd._gen.process.process_connect import ProcessClient, ProcessClientSync

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from tests.envd_process import EnvdProcess


@pytest.fixture
def proc(envd: EnvdProcess) -> Iterator[ProcessClientSync]:
    """JSON codec, as the SDKs use."""
    with ProcessClientSync(envd.url, codec=proto_json_codec(), send_compression=None) as client:
        yield client


@pytest.fixture
async def client(envd: EnvdProcess) -> AsyncIterator[ProcessClient]:
    """The async client, JSON codec as the SDKs use."""
    async with ProcessClient(envd.url, codec=proto_json_codec(), send_compression=None) as c:
        yield c
