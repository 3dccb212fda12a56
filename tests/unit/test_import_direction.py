"""sandboxd's packages import only downwards (the contracts in pyproject.toml's
`[tool.importlinter]`, docs/sandboxd.md "Layout"): the tree as it is keeps them, and a
back-arrow planted in a copy of it breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the `sandboxd` package in `tree`, with the repository's contracts."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(
        REPO / "sandboxd", tree / "sandboxd", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_keeps_the_direction(tmp_path: Path) -> None:
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "back_arrow"),
    [
        ("host/libc.py", "from sandboxd.runtime import dialer"),
        ("runtime/dialer.py", "from sandboxd.daemon import serve"),
        ("lifecycle/ingress.py", "import sandboxd.api.app"),
    ],
)
def test_a_planted_back_arrow_breaks_it(tmp_path: Path, module: str, back_arrow: str) -> None:
    tree = _copy(tmp_path)
    path = tree / "sandboxd" / module
    path.write_text(path.read_text() + f"\n{back_arrow}  # planted\n")
    done = _lint(tree)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    importer = "sandboxd." + module.removesuffix(".py").replace("/", ".")
    assert importer in done.stdout, done.stdout
