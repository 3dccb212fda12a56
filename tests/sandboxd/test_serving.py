"""The serve fixture's own rule (tests/sandboxd/serving.py): serve networks its sandboxes by
default, so outside the fake internet a test's serve must have `--no-network`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.sandboxd.serving import NO_NETWORK, NetworkedOutsideFakeInternet, Sandboxd

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("flags", [(), ("--pool", "1"), ("--network-pool", "10.12.0.0/16")])
def test_a_networked_serve_outside_the_fake_internet_is_refused(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    server = Sandboxd(tmp_path / "state", None, *flags)
    with pytest.raises(NetworkedOutsideFakeInternet, match=NO_NETWORK):
        server.start()
    assert server.proc is None  # nothing was started
    assert not server.log.exists()
