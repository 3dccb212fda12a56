"""packaging/artifact/requirements.txt, the artifact's wheels, against what envd imports: every
distribution that envd's code imports is pinned there, at the version this tree's tests run
with. A missing pin makes an artifact whose envd never starts (`envd -version` loads no server
module); packaging/build-artifact catches that only after a build, this without one."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "packaging" / "artifact" / "requirements.txt"


def pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in REQUIREMENTS.read_text().splitlines():
        if match := re.match(r"([A-Za-z0-9._-]+)==(\S+)", line):
            pins[normalize(match[1])] = match[2]
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_level_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "envd").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"envd", "__future__"}


def test_every_distribution_envd_imports_is_pinned_for_the_artifact() -> None:
    providers = importlib.metadata.packages_distributions()
    pins = pinned()
    wanted = {
        normalize(dist): importlib.metadata.version(dist)
        for name in imported_top_level_names()
        for dist in providers.get(name, [])
    }
    assert wanted, "no third-party import found under envd/"
    missing = {dist: version for dist, version in wanted.items() if dist not in pins}
    assert not missing, f"imported by envd but not in {REQUIREMENTS.name}: {missing}"
    stale = {d: (pins[d], v) for d, v in wanted.items() if pins[d] != v}
    assert not stale, f"{REQUIREMENTS.name} pin vs installed: {stale}"
