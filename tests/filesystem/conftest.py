"""Connect clients for the filesystem service on the shared daemon, in both codecs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from connectrpc.codec import proto_binary_codec, proto_json_codec

from envd._gen.filesystem.filesystem_connect import FilesystemClientSync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.envd_process import EnvdProcess


@pytest.fixture
def fs(envd: EnvdProcess) -> Iterator[FilesystemClientSync]:
    """JSON codec, as the SDKs use."""
    with FilesystemClientSync(envd.url, codec=proto_json_codec(), send_compression=None) as c:
        yield c


@pytest.fixture
def fs_proto(envd: EnvdProcess) -> Iterator[FilesystemClientSync]:
    """Binary protobuf codec."""
    with FilesystemClientSync(envd.url, codec=proto_binary_codec(), send_compression=None) as c:
        yield c
