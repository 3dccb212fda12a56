"""The base template's root filesystem for tests, built once and cached by its sources.

Shared by the sandboxd tests (conftest.py) and scripts/test-sandboxd-sdk, which prints the path
with `python -m tests.sandboxd.template_cache`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from sandboxd.builds.base_image import BUILD_FILE, RECIPE, SOURCE_TREE, build_base
from sandboxd.host.removal import bound_somewhere, remove_tree

# The debootstrap stage is shared with scripts/test-image, so CI debootstraps once.
IMAGE_CACHE = Path(os.environ.get("ENVD_IMAGE_CACHE", "/var/cache/envd-image"))
# What goes into the base template besides the stage: a change to any of it rebuilds it.
TEMPLATE_SOURCES = ("envd", "packaging", "pyproject.toml", "sandboxd/builds/base_image.py")


def _template_key() -> str:
    digest = hashlib.sha256(RECIPE.encode())
    for top in TEMPLATE_SOURCES:
        path = SOURCE_TREE / top
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                digest.update(str(f.relative_to(SOURCE_TREE)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:12]


def _prune_old_templates(keep: Path) -> None:
    for old in IMAGE_CACHE.glob("sandboxd-base-*"):
        if old != keep and not old.name.endswith(".new") and not bound_somewhere(old):
            remove_tree(old)


def ensure_base_template() -> Path:
    """The base template's root filesystem built from this source tree, cached by its sources
    (about 20 s when the debootstrap stage is cached, 2 minutes more when it is not)."""
    key = _template_key()
    dest = IMAGE_CACHE / f"sandboxd-base-{key}"
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(IMAGE_CACHE / ".sandboxd-base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / BUILD_FILE).is_file():
            build_base(dest, IMAGE_CACHE, commit=key[:7])
            _prune_old_templates(dest)
    return dest


if __name__ == "__main__":
    print(ensure_base_template())  # noqa: T201  # the script reads the path from stdout
