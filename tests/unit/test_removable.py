"""check_removable() on `/`: never sent over the wire, where Remove runs as root on the real
filesystem and a missing guard would be a disaster."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from envd.filesystem.remove import ProtectedPathError, check_removable

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("root", ["/", "//", "/.", "/tmp/.."])
@pytest.mark.parametrize("home", ["/root", "/home/user", "/nonexistent"])
def test_root_directory_is_refused(root: str, home: str) -> None:
    with pytest.raises(ProtectedPathError, match="contains the user's home directory"):
        check_removable(root, home)


def test_other_directories_are_removable(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "homework").mkdir()  # shares a prefix with the home, does not hold it
    check_removable(str(tmp_path / "homework"), str(tmp_path / "home"))
    check_removable(str(tmp_path / "missing"), str(tmp_path / "home"))
