"""The manifest and layer formats registries serve: Docker's schema 2 as well as OCI, image
indexes (the machine's platform is pulled), and layers gzipped, zstd-compressed or plain."""

from __future__ import annotations

import hashlib
import json
import subprocess
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import ImageError
from sandboxd.images.pull import pull
from sandboxd.images.unpack import unpack
from tests.images.oci_layout import Layer, compress, digest, layer_digest, write_layout

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from tests.images.registry import Registry

pytestmark = pytest.mark.root


def _served_manifest(registry: Registry, name: str) -> bytes:
    """The manifest the registry serves for `name`, as it serves it."""
    return subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/{name}"],
        check=True, capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": str(registry.dir)},
    ).stdout  # fmt: skip


def test_docker_schema_2(registry: Registry, tmp_path: Path, store: LayerStore) -> None:
    write_layout(tmp_path / "oci", [Layer().file("f", b"docker")], {"Cmd": ["sh"]})
    registry.push(tmp_path / "oci", "test/docker:1", "--format", "v2s2")
    served = _served_manifest(registry, "test/docker:1")
    assert json.loads(served)["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"

    image = pull(f"{registry.host}/test/docker:1", store, insecure=True)

    assert image.digest == f"sha256:{hashlib.sha256(served).hexdigest()}"
    assert (image.layers[0] / "f").read_bytes() == b"docker"
    assert image.config.cmd == ("sh",)


def test_an_index_gives_this_machines_platform(
    registry: Registry, tmp_path: Path, store: LayerStore
) -> None:
    amd64, arm64 = Layer().file("arch", b"amd64"), Layer().file("arch", b"arm64")
    write_layout(tmp_path / "oci", [amd64], {}, arm64_layers=[arm64])
    registry.push(tmp_path / "oci", "test/multi:1", "--all")
    index = _served_manifest(registry, "test/multi:1")
    (instance,) = [m for m in json.loads(index)["manifests"]
                   if m["platform"]["architecture"] == "amd64"]  # fmt: skip

    image = pull(f"{registry.host}/test/multi:1", store, insecure=True)
    pinned = pull(
        f"{registry.host}/test/multi@sha256:{hashlib.sha256(index).hexdigest()}",
        store,
        insecure=True,
    )

    assert image.digest == pinned.digest == instance["digest"]
    assert image.layers == pinned.layers == (store.path(layer_digest(amd64)),)
    assert (image.layers[0] / "arch").read_bytes() == b"amd64"


def test_zstd_layers(registry: Registry, tmp_path: Path, store: LayerStore) -> None:
    base = Layer().file("etc/os-release", b"ID=test\n").file("etc/gone", b"x")
    top = Layer().whiteout("etc/gone").file("bin/tool", b"tool", mode=0o755)
    write_layout(tmp_path / "oci", [base, top], {}, compression="zstd")
    registry.push(tmp_path / "oci", "test/zstd:1")

    image = pull(f"{registry.host}/test/zstd:1", store, insecure=True)

    assert image.layers == tuple(store.path(layer_digest(x, "zstd")) for x in (base, top))
    assert (image.layers[0] / "etc/os-release").read_bytes() == b"ID=test\n"
    assert (image.layers[1] / "etc/gone").lstat().st_rdev == 0
    assert (image.layers[1] / "bin/tool").stat().st_mode & 0o777 == 0o755


def test_plain_and_corrupt_layers(tmp_path: Path, store: LayerStore) -> None:
    """skopeo gzips plain layers on their way into a registry: these come from files."""
    layer = Layer().file("plain", b"as it is")
    tar = layer.tar()
    (tmp_path / "plain").write_bytes(tar)
    (tmp_path / "corrupt").write_bytes(compress(tar, "zstd")[:-16])

    path, made = store.add(digest(tar), lambda new: unpack(tmp_path / "plain", new, digest(tar)))
    assert made
    assert (path / "plain").read_bytes() == b"as it is"
    with pytest.raises(ImageError, match=r"^(layer corrupt: |zstd could not decompress)"):
        store.add(digest(b"corrupt"), lambda new: unpack(tmp_path / "corrupt", new, digest(tar)))
    assert store.find(digest(b"corrupt")) is None
