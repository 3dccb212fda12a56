"""The images template builds start from, made by the test and pushed to its own registry
(tests/images/registry.py), so that no build reaches a public registry:

- `debian`: the debootstrap stage the base template is made from (sandboxd/host/base_image.py,
  ensure_stage: bookworm with systemd, sudo, python3 and curl), as one plain tar layer;
- `busybox`: a busybox-style tree like Docker's `busybox:glibc`: Debian's dynamically linked
  `busybox`, the shared objects of glibc and of GCC's runtime copied from the host, /bin/sh and
  every applet a link to busybox, and an /etc/passwd with only root. No systemd, no Python, no
  package manager.

Each is written as an OCI image layout (one layer, uncompressed: a 360 MiB stage is gzipped in
tens of seconds, and registries and pulls take plain layers as they are) and pushed with skopeo.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxd.host.base_image import ensure_stage

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.images.registry import Registry

LAYER = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
# glibc's shared objects live here on Debian (and so, in the image, where the loader looks).
LIBDIR = "lib/x86_64-linux-gnu"
LOADER = "lib64/ld-linux-x86-64.so.2"
DEBIAN_REPO, BUSYBOX_REPO = "builds/debian", "builds/busybox"
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


def debian_layer(stage_cache: Path, out: Path) -> None:
    """The debootstrap stage (built into `stage_cache` when absent) as a tar at `out`: numeric
    owners, xattrs and capabilities kept, as `docker export` of such a tree would give."""
    stage = ensure_stage(stage_cache)
    subprocess.run(
        ["tar", "--create", "--file", str(out), "--numeric-owner", "--xattrs",
         "--xattrs-include=security.capability", "--directory", str(stage), "."],
        check=True,
    )  # fmt: skip


def glibc_objects() -> list[Path]:
    """The host's glibc shared objects (Debian's libc6) and GCC's runtime (libgcc-s1, which the
    envd artifact needs too), as busybox:glibc ships them."""
    found = []
    for package in ("libc6", "libgcc-s1"):
        listed = subprocess.run(["dpkg", "-L", package], check=True, capture_output=True, text=True)
        for line in listed.stdout.splitlines():
            path = Path(line)
            if ".so" in path.name and path.parent.name == "x86_64-linux-gnu" and path.is_file():
                found.append(path)
    return sorted(set(found))


def busybox_layer(out: Path) -> None:
    """A busybox-style root filesystem as a tar at `out` (see the module docstring)."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True)

    def add(tar: tarfile.TarFile, name: str, kind: bytes, mode: int, **extra: object) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = kind, mode
        for key, value in extra.items():
            setattr(info, key, value)
        tar.addfile(info)

    def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "home", "lib", LIBDIR, "lib64", "root", "usr", "usr/bin",
                  "usr/sbin", "var", "var/spool", "var/spool/mail"):  # fmt: skip
            add(tar, d, tarfile.DIRTYPE, 0o700 if d == "root" else 0o755)
        add(tar, "tmp", tarfile.DIRTYPE, 0o1777)
        add_file(tar, "bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets.stdout.split():
            if applet != "busybox":
                add(tar, f"bin/{applet}", tarfile.SYMTYPE, 0o777, linkname="busybox")
        for lib in glibc_objects():
            if lib.name == Path(LOADER).name:
                add_file(tar, LOADER, lib.read_bytes(), 0o755)
            else:
                add_file(tar, f"{LIBDIR}/{lib.name}", lib.read_bytes(), 0o755)
        add_file(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file(tar, "etc/group", b"root:x:0:\n")
        add_file(tar, "etc/shadow", b"root:*::0:::::\n", 0o600)


def push_image(
    registry: Registry, work: Path, repo: str, make_layer: Callable[[Path], None]
) -> str:
    """Make a one-layer image with `make_layer(tar_path)`, push it as `repo:latest`; its
    reference in the registry (127.0.0.1:PORT/REPO:latest)."""
    work.mkdir(parents=True, exist_ok=True)
    layer = work / "layer.tar"
    make_layer(layer)
    layout = work / "layout"
    write_layout(layout, layer, {"Env": [PATH_ENV], "Cmd": ["/bin/sh"]})
    registry.push(layout, f"{repo}:latest")
    shutil.rmtree(layout)
    return f"{registry.host}/{repo}:latest"


def push_test_images(registry: Registry, work: Path, stage_cache: Path) -> dict[str, str]:
    """Both images pushed: {"debian": ref, "busybox": ref}."""
    return {
        "debian": push_image(
            registry, work / "debian", DEBIAN_REPO, lambda out: debian_layer(stage_cache, out)
        ),
        "busybox": push_image(registry, work / "busybox", BUSYBOX_REPO, busybox_layer),
    }
