"""Images pulled before, by the reference that named them: a build that is not forced reuses
what a reference named at its last pull, as `docker build` does without `--pull` (a cached
rebuild then asks no registry anything: the registry round trips were most of its time), and
a forced one pulls again, seeing a moved tag. A record whose layers were collected since is
not used. One JSON file per reference (and account), beside the layers, their paths portable
(sandboxd.layers.portable) from the state directory the layers are in."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict
from typing import TYPE_CHECKING

from sandboxd.images.manifest import ImageConfig
from sandboxd.images.pull import Image
from sandboxd.layers.portable import recorded, resolved

if TYPE_CHECKING:
    from pathlib import Path

DIR = ".images"


class KnownImages:
    def __init__(self, layers_dir: Path) -> None:
        self.dir = layers_dir / DIR
        self.root = layers_dir.parent  # the state directory

    def _file(self, ref: str, account: str | None) -> Path:
        return self.dir / (hashlib.sha256(f"{ref}\n{account or ''}".encode()).hexdigest() + ".json")

    def get(self, ref: str, account: str | None) -> Image | None:
        """The image `ref` named at its last pull, if all its layers are still there."""
        try:
            data = json.loads(self._file(ref, account).read_text())
            c = data["config"]
            config = ImageConfig(tuple(c["env"]), c["working_dir"], c["user"],
                                 _strings(c["entrypoint"]), _strings(c["cmd"]))  # fmt: skip
            layers = tuple(resolved(p, self.root) for p in data["layers"])
            image = Image(data["reference"], data["digest"], layers, config, 0)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return image if all(p.is_dir() for p in image.layers) else None

    def put(self, ref: str, account: str | None, image: Image) -> None:
        data = asdict(image)
        data["layers"] = [recorded(p, self.root) for p in image.layers]
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self._file(ref, account)
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, final)


def _strings(value: list[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)
