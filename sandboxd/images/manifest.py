"""Reading a pulled image (skopeo's `dir:` layout: `manifest.json` and blobs named by their hex
digest): its layers in order and its config, each blob checked against the digest that names it.
Docker schema 2 and OCI manifests; schema 1 and foreign (Windows) layers are refused."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandboxd.errors import ImageError

if TYPE_CHECKING:
    from pathlib import Path

_MANIFESTS = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageConfig:
    """What a container of the image runs with (the config blob's `config`)."""

    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LayerBlob:
    digest: str  # of the blob as stored (compressed or not): its name in the layer store
    diff_id: str  # of the uncompressed tar (the config's rootfs.diff_ids)
    path: Path


@dataclass(frozen=True)
class PulledImage:
    digest: str  # of the manifest: what `name@digest` pins
    config: ImageConfig
    layers: tuple[LayerBlob, ...]  # lowest first


def read(layout: Path) -> PulledImage:
    """The image in the `dir:` layout `layout`, every blob verified.

    Raises:
        ImageError: a manifest of a kind sandboxd does not take, or a blob whose sha256 is not
            its digest, or a config that does not match the layers.
    """
    raw = (layout / "manifest.json").read_bytes()
    try:
        return _read(layout, raw)
    except (KeyError, TypeError, AttributeError) as e:
        raise ImageError(f"a malformed manifest or image config ({e!r} is wrong)") from e


def _read(layout: Path, raw: bytes) -> PulledImage:
    manifest = _json(raw, "manifest")
    if manifest.get("schemaVersion") != 2 or manifest.get("mediaType", _MANIFESTS[1]) not in (
        _MANIFESTS
    ):
        raise ImageError(f"unsupported manifest ({manifest.get('mediaType', 'schema 1')})")
    config_blob = verified(layout, manifest["config"]["digest"])
    config = _json(config_blob.read_bytes(), "image config")
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    layers = manifest.get("layers", [])
    if len(diff_ids) != len(layers):
        raise ImageError(f"the config names {len(diff_ids)} layers, the manifest {len(layers)}")
    for layer in layers:
        if "foreign" in layer.get("mediaType", "") or "nondistributable" in layer["mediaType"]:
            raise ImageError(f"layer {layer['digest']} is a foreign layer ({layer['mediaType']})")
    blobs = tuple(
        LayerBlob(layer["digest"], diff_id, verified(layout, layer["digest"]))
        for layer, diff_id in zip(layers, diff_ids, strict=True)
    )
    return PulledImage(f"sha256:{hashlib.sha256(raw).hexdigest()}", _config(config), blobs)


def verified(layout: Path, digest: str) -> Path:
    """The blob `digest` in `layout`, once its sha256 is checked.

    Raises:
        ImageError: the digest is not a sha256 one, the blob is missing, or its content differs.
    """
    algorithm, _, hex_digest = digest.partition(":")
    if algorithm != "sha256" or len(hex_digest) != 64 or not _is_hex(hex_digest):
        raise ImageError(f"unsupported digest '{digest}' (sandboxd checks sha256 ones)")
    path = layout / hex_digest
    if not path.is_file():
        raise ImageError(f"blob {digest} is missing from the pulled image")
    found = file_sha256(path)
    if found != digest:
        raise ImageError(f"blob {digest} has digest {found}: refused")
    return path


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return f"sha256:{sha.hexdigest()}"


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _json(raw: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ImageError(f"the {what} is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ImageError(f"the {what} is not a JSON object")
    return doc


def _config(doc: dict[str, Any]) -> ImageConfig:
    c = doc.get("config") or {}

    def words(key: str) -> tuple[str, ...] | None:
        value = c.get(key)
        return None if value is None else tuple(str(v) for v in value)

    return ImageConfig(
        env=words("Env") or (),
        working_dir=str(c.get("WorkingDir") or ""),
        user=str(c.get("User") or ""),
        entrypoint=words("Entrypoint"),
        cmd=words("Cmd"),
    )
