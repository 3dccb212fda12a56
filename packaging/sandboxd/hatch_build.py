"""Hatchling build hook for sandboxd's distribution: maps in the sandboxd package from the
repository's top (or from an unpacked sdist's tree/) and, in the wheel, ships what building the
base template needs as sandboxd/recipe/: envd's wheel and packaging/'s install files."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.builders.wheel import WheelBuilder

# What packaging/install.sh --wheel needs besides the wheel, and the units `sandboxd
# install-service` writes; sandboxd/builds/base_image.py and sandboxd/daemon/systemd_unit.py
# read them there.
RECIPE_FILES = (
    "packaging/install.sh",
    "packaging/add-user",
    "packaging/isnotfc.conf",
    "packaging/envd.service",
    "packaging/sandboxd.service",
    "packaging/systemd/sandboxd-node.service",
    "packaging/systemd/sandboxd-gateway.service",
)
# envd's own project: its wheel is built from these (an sdist carries them in tree/).
ENVD_PROJECT = ("pyproject.toml", "README.md", "envd")
SDIST_TREE = "tree"
BUILD_MODULE = "envd/_build.py"


class SandboxdBuildHook(BuildHookInterface):  # type: ignore[type-arg]  # untyped generic
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":  # dev-mode-dirs puts the repository on sys.path
            return
        tree = self._tree()
        include: dict[str, str] = build_data["force_include"]
        self._temp = Path(tempfile.mkdtemp(prefix="sandboxd-build-"))
        if self.target_name == "sdist":
            for path in ("sandboxd", *ENVD_PROJECT, *RECIPE_FILES):
                include[str(tree / path)] = f"{SDIST_TREE}/{path}"
            if not (tree / BUILD_MODULE).is_file():
                include[str(self._build_module(tree))] = f"{SDIST_TREE}/{BUILD_MODULE}"
            return
        include[str(tree / "sandboxd")] = "sandboxd"
        for path in RECIPE_FILES:
            include[str(tree / path)] = f"sandboxd/recipe/{path}"
        wheel = self._envd_wheel(tree)
        include[str(wheel)] = f"sandboxd/recipe/{wheel.name}"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if version != "editable":
            shutil.rmtree(self._temp, ignore_errors=True)

    def _tree(self) -> Path:
        """The repository (two levels up), or the tree/ an unpacked sdist carries."""
        root = Path(self.root)
        for tree in (root / SDIST_TREE, root.parents[1]):
            if (tree / "sandboxd").is_dir() and (tree / "envd").is_dir():
                return tree
        raise FileNotFoundError(f"no sandboxd and envd sources at {root.parents[1]} or {root}")

    def _build_module(self, tree: Path) -> Path:
        """envd/_build.py naming the commit `envd -commit` prints (as install.sh writes it)."""
        done = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        commit = done.stdout.strip() if done.returncode == 0 else "unknown"
        path = self._temp / "_build.py"
        path.write_text(f'"""Written by sandboxd\'s build."""\n\nCOMMIT = "{commit}"\n')
        return path

    def _envd_wheel(self, tree: Path) -> Path:
        """envd's wheel, built by hatchling from a copy of its project with the commit stamped."""
        project = self._temp / "envd-project"
        project.mkdir()
        for path in ENVD_PROJECT:
            source = tree / path
            if source.is_dir():
                shutil.copytree(
                    source, project / path, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copyfile(source, project / path)
        if not (project / BUILD_MODULE).is_file():
            shutil.copyfile(self._build_module(tree), project / BUILD_MODULE)
        out = self._temp / "dist"
        built = list(WheelBuilder(str(project)).build(directory=str(out), versions=["standard"]))
        return Path(built[0])
