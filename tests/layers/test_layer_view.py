"""Reading an image's files through its layers from the host (sandboxd.layers.layer_view):
the top layer wins, whiteouts hide, directory links resolve inside the image and never into the
host."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from sandboxd.layers import layer_view

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root  # whiteouts are character devices: mknod needs root


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


@pytest.fixture
def layers(tmp_path: Path) -> list[Path]:
    low, mid, top = (tmp_path / n for n in ("low", "mid", "top"))
    for layer in (low, mid, top):
        layer.mkdir()
    write(low, "usr/bin/bash", "bash")
    os.symlink("usr/bin", low / "bin")
    write(low, "etc/passwd", "root:x:0:0::/root:/bin/sh\n")
    write(low, "etc/group", "root:x:0:\nstaff:x:50:\n")
    write(low, "etc/gone", "old")
    write(mid, "etc/passwd", "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    os.mknod(mid / "etc" / "gone", stat.S_IFCHR, 0)  # a whiteout
    (top / "opt").mkdir()
    os.symlink("/etc", top / "opt" / "escape")  # absolute: the image's /etc, not the host's
    return [low, mid, top]


def test_the_top_layer_wins_and_whiteouts_hide(layers: list[Path]) -> None:
    assert "user:x:1000" in (layer_view.read_text(layers, "/etc/passwd") or "")
    assert layer_view.read_text(layers, "/etc/gone") is None
    assert layer_view.read_text(layers[:1], "/etc/gone") == "old"


def test_links_resolve_inside_the_image(layers: list[Path]) -> None:
    found = layer_view.resolve(layers, "/bin/bash")
    assert found is not None
    assert found[0] == layers[0] / "usr/bin/bash"
    found = layer_view.resolve(layers, "/opt/escape/passwd")
    assert found is not None
    assert found[0] == layers[1] / "etc/passwd"
    assert layer_view.read_text(layers, "/opt/escape/shadow") is None  # not the host's
    assert layer_view.resolve(layers, "/../../etc/passwd") == layer_view.resolve(
        layers, "/etc/passwd"
    )


def test_a_lower_layers_link_under_a_directory_above_is_not_followed(tmp_path: Path) -> None:
    """An image's lower layer made /etc a link to a host directory and a layer above made it a
    directory again: the files under it were looked up through the lower layer's link, so the
    user a build's USER or COPY step named was read from the host."""
    host = tmp_path / "host"
    write(host, "passwd", "hostonly:x:4242:4242::/:/bin/sh\n")
    low, top = tmp_path / "low", tmp_path / "top"
    low.mkdir()
    os.symlink(host, low / "etc")
    (top / "etc").mkdir(parents=True)
    assert layer_view.resolve([low, top], "/etc/passwd") is None
    assert layer_view.read_text([low, top], "/etc/passwd") is None
    assert layer_view.ids_of([low, top], "hostonly") is None
    assert layer_view.read_text([low], "/etc/passwd") is None  # the link itself: the image's /


def test_users_and_groups_by_name_and_number(layers: list[Path]) -> None:
    assert layer_view.ids_of(layers, "user") == (1000, 1000)
    assert layer_view.ids_of(layers, "root:staff") == (0, 50)
    assert layer_view.ids_of(layers, "1234") == (1234, 1234)
    assert layer_view.ids_of(layers, "user:77") == (1000, 77)
    assert layer_view.ids_of(layers, "nobody") is None
    assert layer_view.ids_of(layers, "user:nogroup") is None
