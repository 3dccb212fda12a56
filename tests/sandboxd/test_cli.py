"""sandboxd's command line: help, usage errors and refusals are one clear line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


def sandboxd(*args: str, as_user: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", "--reuid=user", "--regid=user", "--clear-groups"] if as_user else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "sandboxd", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_help_names_the_build_command() -> None:
    done = sandboxd("template", "build-base", "-h")
    assert done.returncode == 0
    assert "--state-dir" in done.stdout


def test_a_missing_command_is_a_usage_error() -> None:
    done = sandboxd()
    assert done.returncode == 2
    assert "required: COMMAND" in done.stderr


@pytest.mark.root
def test_building_without_root_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = sandboxd("template", "build-base", "--state-dir", str(tmp_path), as_user=True)
    assert done.returncode == 2
    assert done.stderr == "sandboxd: building a template needs root\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--network-pool", "10.11.0.0/31"], "a pool needs a prefix of /30 or shorter"),
        (["--network-pool", "10.11.0.1/16"], "has host bits set"),
        (["--network-pool", "10.11.0.0/16", "--dns", "resolver"], "does not appear to be"),
        (["--no-network", "--dns", "198.51.100.53"], "sandboxd: --no-network cannot be combined"),
        (["--network-pool", "10.12.0.0/16", "--no-network"], "sandboxd: --no-network cannot be"),
        (["--envd-artifact", "no-such-tarball"], "argument --envd-artifact: no file at"),
    ],
)
def test_network_options_are_checked_before_anything_is_touched(
    args: list[str], error: str, tmp_path: Path
) -> None:
    done = sandboxd("serve", "--state-dir", str(tmp_path / "state"), *args)
    assert done.returncode == 2
    assert error in done.stderr
    assert not (tmp_path / "state").exists()
