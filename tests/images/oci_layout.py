"""Images the tests make themselves: layers as gzipped tars built entry by entry, written as an
OCI image layout (oci-layout, index.json, blobs/sha256/…) that skopeo pushes to the test's
registry."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
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


def write_layout(
    dir: Path, layers: list[Layer], config: dict[str, object], *, wrong_diff_id: bool = False
) -> None:
    """An OCI image layout at `dir` with one image (tagged `latest`) of `layers`, lowest first.
    With `wrong_diff_id`, the config names a wrong digest for the last layer's tar."""
    blobs = dir / "blobs/sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> str:
        d = digest(data)
        (blobs / d.removeprefix("sha256:")).write_bytes(data)
        return d

    tars = [layer.tar() for layer in layers]
    diff_ids = [digest(t) for t in tars]
    if wrong_diff_id:
        diff_ids[-1] = digest(b"not this layer")
    gz = [gzip.compress(t, mtime=0) for t in tars]
    image_config = {"architecture": "amd64", "os": "linux", "config": config,
                    "rootfs": {"type": "layers", "diff_ids": diff_ids}}  # fmt: skip
    config_data = json.dumps(image_config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": blob(config_data),
            "size": len(config_data),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": blob(g),
                "size": len(g),
            }
            for g in gz
        ],
    }
    manifest_data = json.dumps(manifest).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": blob(manifest_data),
        "size": len(manifest_data), "annotations": {"org.opencontainers.image.ref.name": "latest"},
    }]}  # fmt: skip
    (dir / "index.json").write_text(json.dumps(index))
    (dir / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def layer_digest(layer: Layer) -> str:
    """The digest of `layer` as write_layout stores it (gzipped with a zero mtime)."""
    return digest(gzip.compress(layer.tar(), mtime=0))
