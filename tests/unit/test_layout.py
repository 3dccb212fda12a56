"""Structural facts of sandboxd's code that keep it readable: no module over 400 lines, no HTTP
status below the API (the lifecycle, templates and host raise sandboxd.errors' domain errors),
and the sandbox id's pattern written once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "sandboxd"
MODULES = sorted(ROOT.rglob("*.py"))
MAX_LINES = 400
# The API and the entry points that put sandboxd together (cli, serve, gateway, node) aside.
ENTRY_POINTS = {"cli.py", "serve.py", "gateway.py", "node_agent.py", "__main__.py"}
BELOW_THE_API = [
    p for p in MODULES if p.relative_to(ROOT).parts[0] != "api" and p.name not in ENTRY_POINTS
]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT.parent))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_is_at_most_400_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{_name(path)} has {lines} lines: split it by job"


@pytest.mark.parametrize("path", BELOW_THE_API, ids=_name)
def test_no_http_errors_below_the_api(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            assert not node.module.startswith("sandboxd.api"), (
                f"{_name(path)}:{node.lineno} imports {node.module}: errors below the API are "
                "sandboxd.errors', mapped to HTTP in sandboxd/api/errors.py"
            )
        if isinstance(node, ast.Name):
            assert node.id not in {"RequestError", "HTTPException"}, (
                f"{_name(path)}:{node.lineno} uses {node.id}"
            )


def test_the_sandbox_id_pattern_is_written_once() -> None:
    pattern = re.compile(r"""re\.compile\(r?["']\^\[a-z0-9\]\{1,63\}""")
    where = [_name(p) for p in MODULES if pattern.search(p.read_text())]
    assert where == ["sandboxd/ids.py"]
