"""packaging/systemd/'s units through `systemd-analyze verify`, which needs no systemd running:
clean, with no output at all (an unknown key or a typo is only a warning with exit status 0).
verify also insists that every Exec program exists, so the copies checked run this venv's
sandboxd instead of /usr/local/bin's, as packaging/verify-unit does for sandboxd.service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging.deployment import units

INSTALLED = "/usr/local/bin/sandboxd"


def _verify(unit: Path, text: str, tmp_path: Path) -> str:
    sandboxd = Path(sys.executable).parent / "sandboxd"
    (tmp_path / unit.name).write_text(text.replace(INSTALLED, str(sandboxd)))
    # The trailing ':' keeps the standard unit directories (network-online.target...).
    env = os.environ | {"SYSTEMD_UNIT_PATH": f"{tmp_path}:"}
    done = subprocess.run(["systemd-analyze", "verify", unit.name], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    return f"exit status {done.returncode}\n{done.stdout}{done.stderr}"


def test_both_roles_have_a_unit() -> None:
    assert [unit.name for unit in units()] == ["sandboxd-gateway.service", "sandboxd-node.service"]


@pytest.mark.parametrize("unit", units(), ids=lambda unit: unit.name)
def test_unit_verifies_clean(unit: Path, tmp_path: Path) -> None:
    text = unit.read_text()
    assert f"ExecStart={INSTALLED} " in text
    assert _verify(unit, text, tmp_path) == "exit status 0\n"


def test_a_mistyped_key_is_reported(tmp_path: Path) -> None:
    unit = units()[0]
    broken = unit.read_text().replace("Restart=on-failure", "Restrt=on-failure")
    assert "Unknown key 'Restrt'" in _verify(unit, broken, tmp_path)
