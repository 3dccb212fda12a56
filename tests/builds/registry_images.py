"""The images template builds start from, made by the test and pushed to its own registry
(tests/images/registry.py), so that no build reaches a public registry:

- `debian`: the debootstrap stage the base template is made from (sandboxd/builds/base_image.py,
  ensure_stage: bookworm with systemd, sudo, python3 and curl), as one plain tar layer;
- `busybox`: the busybox-style tree of tests/builds/trees.py, like Docker's `busybox:glibc`
  (Debian's busybox, /bin/sh and every applet a link to it, glibc and GCC's runtime from the
  host, an /etc/passwd with only root): no systemd, no Python, no bash, no package manager.

Each is written as an OCI image layout (one layer, uncompressed: a 360 MiB stage is gzipped in
tens of seconds, and registries and pulls take plain layers as they are) and pushed with skopeo.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from typing import TYPE_CHECKING

from sandboxd.builds.base_image import ensure_stage
from tests.builds.trees import glibc_tree

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.images.registry import Registry

LAYER = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
DEBIAN_REPO, BUSYBOX_REPO = "builds/debian", "builds/busybox"
HUB_NAME = "busybox-test:1"  # the busybox image as Docker Hub would name it, through the mirror
# The image config's environment, as Docker's images have it.
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_layout(dir: Path, layer_tar: Path, config: dict[str, object]) -> None:
    """An OCI image layout at `dir`, tagged `latest`: one uncompressed layer, `layer_tar`
    (moved into the layout's blobs), and the image config's `config` part."""
    blobs = dir / "blobs/sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes, media_type: str) -> dict[str, object]:
        hex_digest = hashlib.sha256(data).hexdigest()
        (blobs / hex_digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{hex_digest}", "size": len(data)}

    layer_hex = _sha256_file(layer_tar)
    size = layer_tar.stat().st_size
    layer_tar.rename(blobs / layer_hex)
    # One history entry per layer: builders that stack on the image (podman's buildah) count them.
    image_config = {"architecture": "amd64", "os": "linux", "config": config,
                    "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_hex}"]},
                    "history": [{"created_by": "tests/builds/registry_images.py"}]}  # fmt: skip
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": blob(json.dumps(image_config).encode(), CONFIG),
        "layers": [{"mediaType": LAYER, "digest": f"sha256:{layer_hex}", "size": size}],
    }
    top = blob(json.dumps(manifest).encode(), MANIFEST)
    top["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (dir / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (dir / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def tree_layer(root: Path, out: Path) -> None:
    """The tree at `root` as a tar at `out`: numeric owners, xattrs and capabilities kept, as
    `docker export` of such a tree would give."""
    subprocess.run(
        ["tar", "--create", "--file", str(out), "--numeric-owner", "--xattrs",
         "--xattrs-include=security.capability", "--directory", str(root), "."],
        check=True,
    )  # fmt: skip


def debian_layer(stage_cache: Path, out: Path) -> None:
    """The debootstrap stage (built into `stage_cache` when absent) as a tar at `out`."""
    tree_layer(ensure_stage(stage_cache), out)


def busybox_layer(out: Path) -> None:
    """The busybox tree of tests/builds/trees.py (Debian's busybox, glibc and GCC's runtime from
    the host, root's account) as a tar at `out`."""
    root = out.parent / "busybox-root"
    glibc_tree(root)
    try:
        tree_layer(root, out)
    finally:
        shutil.rmtree(root)


def push_image(
    registry: Registry, work: Path, repo: str, make_layer: Callable[[Path], None], *also: str
) -> str:
    """Make a one-layer image with `make_layer(tar_path)`, push it as `repo:latest` (and as each
    `repo:tag` of `also`); its reference in the registry (127.0.0.1:PORT/REPO:latest)."""
    work.mkdir(parents=True, exist_ok=True)
    layer = work / "layer.tar"
    make_layer(layer)
    layout = work / "layout"
    write_layout(layout, layer, {"Env": [PATH_ENV], "Cmd": ["/bin/sh"]})
    for name in (f"{repo}:latest", *also):
        registry.push(layout, name)
    shutil.rmtree(layout)
    return f"{registry.host}/{repo}:latest"


def push_test_images(registry: Registry, work: Path, stage_cache: Path) -> dict[str, str]:
    """Both images pushed: {"debian": ref, "busybox": ref, "hub": name}. The busybox image is
    also under a Docker Hub name (`library/…`), which a serve whose --registry-mirror is the
    registry pulls by the name as written on Docker Hub: "hub"."""
    return {
        "debian": push_image(
            registry, work / "debian", DEBIAN_REPO, lambda out: debian_layer(stage_cache, out)
        ),
        "busybox": push_image(
            registry, work / "busybox", BUSYBOX_REPO, busybox_layer, f"library/{HUB_NAME}"
        ),
        "hub": HUB_NAME,
    }
