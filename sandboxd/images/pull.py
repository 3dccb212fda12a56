"""Pulling an image into the layer store: skopeo fetches it into a private temporary directory,
every blob is checked against its digest, each layer not yet in the store is unpacked into it,
and the temporary copy goes. The result names the layer directories an overlay stacks (lowest
first) and the config a container of the image runs with. Blocking: callers on the event loop
run it in a thread."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.host.removal import remove_tree
from sandboxd.images import manifest, reference, skopeo
from sandboxd.images.manifest import ImageConfig
from sandboxd.images.skopeo import Credentials
from sandboxd.images.unpack import unpack

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.images.manifest import LayerBlob
    from sandboxd.images.unpack import Quota
    from sandboxd.layers.store import LayerStore

log = logging.getLogger("sandboxd.images.pull")

__all__ = ["Credentials", "Image", "ImageConfig", "pull"]


@dataclass(frozen=True)
class Image:
    """A pulled image: `reference` as normalised (`registry/repository:tag` or `@digest`),
    `digest` of its manifest, its layer directories (lowest first) and its config.
    `unpacked` counts the layers this pull unpacked (the others were in the store already)."""

    reference: str
    digest: str
    layers: tuple[Path, ...]
    config: ImageConfig
    unpacked: int


def pull(
    ref: str,
    layers: LayerStore,
    *,
    mirror: str | None = None,
    credentials: Credentials | None = None,
    insecure: bool = False,
    quota: Quota | None = None,
) -> Image:
    """Pull the image `ref` (`name[:tag]` or `name@sha256:…`; Docker Hub unless it names a
    registry) for this machine's platform into `layers`.

    Args:
        mirror: `host[:port]` to fetch Docker Hub's images from instead (--registry-mirror).
        credentials: the registry account, if the image is not public.
        insecure: plain HTTP or an unchecked certificate: only for 127.0.0.1/localhost.
        quota: what the layers it unpacks may take.

    Raises:
        ImageNotFound: the registry has no such image.
        NotAllowed: `insecure` for a registry elsewhere than on loopback.
        ImageError: a malformed reference, a registry that refused or could not be reached, a
            blob whose digest is not the one named, a layer that would write outside its
            directory.
        Exception: `quota.full(...)`, as soon as a layer would pass it.
        HostError: skopeo is missing.
    """
    image_ref = reference.parse(ref).via_mirror(mirror)
    work = layers.pull_dir()
    try:
        skopeo.copy_to_dir(image_ref, work / "image", work, credentials, insecure)
        pulled = manifest.read(work / "image")
        dirs, unpacked = [], 0
        for blob in pulled.layers:
            path, made = _unpacked(blob, layers, quota)
            dirs.append(path)
            unpacked += made
    finally:
        remove_tree(work)
    return Image(str(image_ref), pulled.digest, tuple(dirs), pulled.config, unpacked)


def _unpacked(blob: LayerBlob, layers: LayerStore, quota: Quota | None) -> tuple[Path, bool]:
    """The layer of `blob` in `layers`, unpacked unless it is there; whether this call did.

    Raises:
        ImageError: it cannot be unpacked (nothing of it is left).
    """
    path, made = layers.add(blob.digest, lambda new: unpack(blob.path, new, blob.diff_id, quota))
    if made:
        log.info("layer %s unpacked", blob.digest)
    return path, made
