"""The envd layer: the self-contained envd artifact (packaging/build-artifact) installed into a
read-only layer of its own, as `packaging/install.sh --artifact TARBALL --root DIR` lays it out
(the prefix /usr/lib/envd, the link /usr/bin/envd, owners 0:0). Stacked on top of an image that
is not ours, it lets nspawn's stub init run envd there (BootImage init "envd"): the artifact
needs nothing from the image but glibc >= 2.28. Made once per artifact (by its sha256) in the
layer store, under a lock and renamed into place, so every template shares it."""

from __future__ import annotations

import logging
import os
import subprocess
from typing import TYPE_CHECKING

from sandboxd.builds.base_image import packaging_dir
from sandboxd.errors import TemplateError
from sandboxd.images.manifest import file_sha256
from sandboxd.runtime.nspawn.container import ENVD_LAUNCHER

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore

log = logging.getLogger("sandboxd.builds.envd_layer")

OPTION = "--envd-artifact"
# Under /usr/lib, not install.sh's default /lib: in an image whose /lib is a link to usr/lib (every
# merged-/usr distribution) a /lib directory in a layer above would hide the image's libraries.
UNIT_DIR = "/usr/lib/systemd/system"


def envd_artifact(configured: Path | None) -> Path:
    """The artifact a build from an image that is not ours installs: serve's --envd-artifact.

    Raises:
        TemplateError: serve was started without one.
    """
    if configured is None:
        raise TemplateError(
            "building from an image that is not a sandboxd template needs the self-contained "
            f"envd artifact: start sandboxd serve with {OPTION} TARBALL "
            "(packaging/build-artifact makes one)"
        )
    return configured


def envd_layer(layers: LayerStore, artifact: Path) -> Path:
    """The envd layer of `artifact` in `layers`, made unless it exists.

    Raises:
        TemplateError: the artifact is missing, or install.sh refused it (it does not match its
            .sha256, is not an artifact, or does not run on this host).
    """
    try:
        digest = file_sha256(artifact)
    except OSError as exc:
        raise TemplateError(f"the envd artifact {artifact}: {exc.strerror}") from exc
    layer, made = layers.add(f"envd-{digest}", lambda new: _install(artifact, new))
    if made:
        log.info("envd layer of %s made at %s", artifact.name, layer)
    return layer


def _install(artifact: Path, root: Path) -> None:
    os.chown(root, 0, 0)
    root.chmod(0o755)
    argv = ["sh", str(packaging_dir() / "install.sh"), "--artifact", str(artifact.absolute()),
            "--root", str(root), "--unit-dir", UNIT_DIR]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, umask=0o022, check=False)
    if done.returncode != 0:
        raise TemplateError(f"installing the envd artifact {artifact}: {done.stderr.strip()}")
    if not (root / ENVD_LAUNCHER.lstrip("/")).is_file():
        raise TemplateError(f"the envd artifact {artifact} has no {ENVD_LAUNCHER}")
