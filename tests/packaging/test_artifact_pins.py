"""packaging/artifact/requirements.txt, the artifact's wheels: exactly what envd's distribution
requires (packaging/artifact/pins derives it), and everything envd's code imports among it, at the
version this tree's tests run with. A missing pin makes an artifact whose envd never starts
(`envd -version` loads no server module); packaging/build-artifact catches that only after a
build, this without one."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "packaging" / "artifact" / "requirements.txt"
PINS = REPO / "packaging" / "artifact" / "pins"


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


def test_the_pins_are_what_envds_distribution_requires() -> None:
    done = subprocess.run(
        [sys.executable, str(PINS), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    # sandboxd's own dependencies stay out of the artifact (and out of templates).
    assert not {"pydantic", "httpcore"} & set(pinned())


def test_the_check_names_each_drift() -> None:
    loader = importlib.machinery.SourceFileLoader("artifact_pins", str(PINS))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    pins = importlib.util.module_from_spec(spec)
    loader.exec_module(pins)
    want = pins.closure()
    assert "uvicorn" in want
    assert "pydantic" not in want
    have = {**want, "pydantic": "2.14.3", "uvicorn": "0.1"}
    del have["starlette"]
    assert sorted(pins.drift(want, have)) == [
        f"missing starlette=={want['starlette']}",
        "not needed pydantic==2.14.3",
        f"uvicorn: 0.1 pinned, {want['uvicorn']} wanted",
    ]
