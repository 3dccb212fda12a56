"""Image references (`name[:tag]`, `name@sha256:…`, with or without a registry host) parsed and
normalised as Docker does: a first component with a dot or a port, or `localhost`, is a registry;
anything else is on Docker Hub, where one-word names are under `library/`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandboxd.errors import ImageError

DOCKER_HUB = "docker.io"
DEFAULT_TAG = "latest"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})

# The distribution spec's grammar (distribution/reference's regexp.go), lower case only.
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?")


@dataclass(frozen=True)
class ImageRef:
    """A fully qualified image: where it is (`registry`, `repository`) and which (`tag`, or
    `digest` when pinned, which wins over a tag)."""

    registry: str
    repository: str
    tag: str = DEFAULT_TAG
    digest: str | None = None

    def __str__(self) -> str:
        which = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self.registry}/{self.repository}{which}"

    @property
    def host(self) -> str:
        """The registry's host name without its port."""
        return self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry

    def on_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    def via_mirror(self, mirror: str | None) -> ImageRef:
        """The same image from `mirror` (a `host[:port]`) when it is on Docker Hub, as dockerd's
        --registry-mirror does; images of other registries are left alone."""
        if mirror is None or self.registry != DOCKER_HUB:
            return self
        return ImageRef(_host(mirror), self.repository, self.tag, self.digest)


def parse(reference: str) -> ImageRef:
    """Parse `reference` as Docker would.

    Raises:
        ImageError: it is not an image reference (the message says which part is wrong).
    """
    name, digest = reference, None
    if "@" in reference:
        name, digest = reference.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise ImageError(f"image '{reference}': a digest is sha256: and 64 hex digits")
    tag = DEFAULT_TAG
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise ImageError(f"image '{reference}': '{tag}' is not a tag")
    parts = name.split("/")
    registry = DOCKER_HUB
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = _host(parts.pop(0))
    if registry == DOCKER_HUB and len(parts) == 1:
        parts.insert(0, "library")
    if not all(_COMPONENT.fullmatch(p) for p in parts):
        raise ImageError(
            f"image '{reference}': a name is lower-case letters, digits and . _ - separated by /"
        )
    return ImageRef(registry, "/".join(parts), tag, digest)


def _host(registry: str) -> str:
    if not _HOST.fullmatch(registry):
        raise ImageError(f"'{registry}' is not a registry host[:port]")
    return registry
