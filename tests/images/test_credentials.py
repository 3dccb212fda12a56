"""Pulling from a registry that wants an account: the credentials given are used, none are
taken from the host, and a refusal is a clear error."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import ImageError
from sandboxd.images.pull import Credentials, pull
from tests.images.oci_layout import Layer, write_layout
from tests.images.registry import ACCOUNT

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from tests.images.registry import Registry

pytestmark = pytest.mark.root


@pytest.fixture
def private_image(private_registry: Registry, tmp_path: Path) -> str:
    write_layout(tmp_path / "oci", [Layer().file("secret", b"for the account only")], {})
    private_registry.push(tmp_path / "oci", "team/private:1")
    return f"{private_registry.host}/team/private:1"


def test_the_account_given_is_used(private_image: str, store: LayerStore) -> None:
    image = pull(private_image, store, credentials=Credentials(*ACCOUNT), insecure=True)

    assert (image.layers[0] / "secret").read_bytes() == b"for the account only"
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".pull-")]


@pytest.mark.parametrize("credentials", [None, Credentials(ACCOUNT[0], "wrong")], ids=str)
def test_without_the_account_the_pull_is_refused(
    private_image: str, store: LayerStore, credentials: Credentials | None
) -> None:
    with pytest.raises(ImageError, match=r"(?i)unauthorized|authentication required"):
        pull(private_image, store, credentials=credentials, insecure=True)
    assert sorted(p.name for p in store.dir.iterdir() if p.name != ".locks") == []


def test_credentials_do_not_show_their_password() -> None:
    assert "s3cret" not in repr(Credentials(*ACCOUNT))
