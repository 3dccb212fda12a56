"""Images the tests make themselves: layers as gzipped tars built entry by entry, written as an
OCI image layout (oci-layout, index.json, blobs/sha256/…) that skopeo pushes to the test's
registry."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

MTIME = 1_700_000_000


@dataclass
class Layer:
    """A layer's entries, in tar order; `tar()` is the uncompressed archive."""

    entries: list[tarfile.TarInfo] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)

    def dir(self, name: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Layer:
        return self._add(name, tarfile.DIRTYPE, mode=mode, uid=uid, gid=gid)

    def file(self, name: str, text: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0,
             xattrs: dict[str, str] | None = None) -> Layer:  # fmt: skip
        info = self._add(name, tarfile.REGTYPE, mode=mode, uid=uid, gid=gid, xattrs=xattrs)
        self.data[name] = text
        self.entries[-1].size = len(text)
        return info

    def symlink(self, name: str, target: str) -> Layer:
        return self._add(name, tarfile.SYMTYPE, linkname=target, mode=0o777)

    def hardlink(self, name: str, target: str) -> Layer:
        return self._add(name, tarfile.LNKTYPE, linkname=target)

    def whiteout(self, name: str) -> Layer:
        """Delete `name` (a path) of the layers below."""
        parent, _, base = name.rpartition("/")
        return self.file(f"{parent}/.wh.{base}" if parent else f".wh.{base}", b"")

    def opaque(self, directory: str) -> Layer:
        return self.file(f"{directory}/.wh..wh..opq", b"")

    def chardev(self, name: str, major: int, minor: int) -> Layer:
        self._add(name, tarfile.CHRTYPE, mode=0o666)
        self.entries[-1].devmajor, self.entries[-1].devminor = major, minor
        return self

    def _add(self, name: str, kind: bytes, *, mode: int = 0o644, uid: int = 0, gid: int = 0,
             linkname: str = "", xattrs: dict[str, str] | None = None) -> Layer:  # fmt: skip
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid = kind, mode, uid, gid
        info.linkname, info.mtime = linkname, MTIME
        if xattrs:
            info.pax_headers = {f"SCHILY.xattr.{k}": v for k, v in xattrs.items()}
        self.entries.append(info)
        return self

    def tar(self) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for info in self.entries:
                body = self.data.get(info.name)
                tar.addfile(info, io.BytesIO(body) if body is not None else None)
        return out.getvalue()


def digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def compress(tar: bytes, compression: str) -> bytes:
    """`tar` gzipped (with a zero mtime: the same layer, the same blob), zstd'ed, or as it is."""
    if compression == "gzip":
        return gzip.compress(tar, mtime=0)
    if compression == "zstd":
        return subprocess.run(
            ["zstd", "-q", "-c"], input=tar, capture_output=True, check=True
        ).stdout
    return tar


MEDIA_TYPES = {
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "none": "application/vnd.oci.image.layer.v1.tar",
}
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def write_layout(
    dir: Path,
    layers: list[Layer],
    config: dict[str, object],
    *,
    wrong_diff_id: bool = False,
    compression: str = "gzip",
    arm64_layers: list[Layer] | None = None,
) -> None:
    """An OCI image layout at `dir` with one image (tagged `latest`) of `layers`, lowest first.
    With `wrong_diff_id`, the config names a wrong digest for the last layer's tar. With
    `arm64_layers`, the tag names an image index: `layers` for linux/amd64, those for arm64."""
    blobs = dir / "blobs/sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> dict[str, object]:
        d = digest(data)
        (blobs / d.removeprefix("sha256:")).write_bytes(data)
        return {"digest": d, "size": len(data)}

    def image(layers: list[Layer], arch: str) -> dict[str, object]:
        tars = [layer.tar() for layer in layers]
        diff_ids = [digest(t) for t in tars]
        if wrong_diff_id:
            diff_ids[-1] = digest(b"not this layer")
        image_config = {"architecture": arch, "os": "linux", "config": config,
                        "rootfs": {"type": "layers", "diff_ids": diff_ids}}  # fmt: skip
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **blob(json.dumps(image_config).encode()),
            },
            "layers": [
                {"mediaType": MEDIA_TYPES[compression], **blob(compress(t, compression))}
                for t in tars
            ],
        }
        return {"mediaType": MANIFEST, **blob(json.dumps(manifest).encode()),
                "platform": {"os": "linux", "architecture": arch}}  # fmt: skip

    top = image(layers, "amd64")
    if arm64_layers is not None:
        listed = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                  "manifests": [top, image(arm64_layers, "arm64")]}  # fmt: skip
        top = {"mediaType": listed["mediaType"], **blob(json.dumps(listed).encode())}
    top["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (dir / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (dir / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def layer_digest(layer: Layer, compression: str = "gzip") -> str:
    """The digest of `layer`'s blob as write_layout stores it."""
    return digest(compress(layer.tar(), compression))
