"""The layers of the layer store shared through a registry (serve's `--registry`,
sandboxd.images.layer_registry): what a build, a snapshot or a pause to disk made is pushed
before the operation is done, and what a sandbox is about to boot is pulled first where the
store lacks it. Only layers of the store are shared (a stack's root filesystem outside it,
base's, is every machine's own). Without a registry both are no-ops."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from sandboxd.images.layer_registry import LayerRegistry
    from sandboxd.layers.store import LayerStore

log = logging.getLogger("sandboxd.images.shared_layers")


class SharedLayers:
    def __init__(self, layers: LayerStore, registry: LayerRegistry | None = None) -> None:
        self.layers = layers
        self.registry = registry

    async def push(self, stack: Iterable[Path]) -> None:
        """Push each layer of `stack` that is the store's, unless the registry has it.

        Raises:
            RegistryError: the registry could not be reached or refused (what was pushed
                stays: the next push skips it).
        """
        if self.registry is not None:
            await asyncio.to_thread(self._push, [p for p in stack if self._ours(p)])

    async def fetch(self, stack: Iterable[Path]) -> None:
        """Pull each layer of `stack` that is the store's and missing from it.

        Raises:
            RegistryError: the registry could not be reached, refused, or has no such layer;
            ImageError: a blob is not what its digest says (nothing of it is left in the store).
        """
        missing = [p for p in stack if self._ours(p) and not p.is_dir()]
        if self.registry is not None and missing:
            await asyncio.to_thread(self._pull, missing)

    def _ours(self, path: Path) -> bool:
        return path.parent == self.layers.dir

    def _push(self, stack: list[Path]) -> None:
        assert self.registry is not None  # noqa: S101  # push checked it
        for layer in stack:
            if self.registry.push(layer, self.layers):
                log.info("layer %s pushed to %s", layer.name, self.registry.url)

    def _pull(self, missing: list[Path]) -> None:
        assert self.registry is not None  # noqa: S101  # fetch checked it
        for layer in missing:
            self.registry.pull(layer.name, self.layers, self.layers.quota)
            log.info("layer %s pulled from %s", layer.name, self.registry.url)

    def close(self) -> None:
        if self.registry is not None:
            self.registry.close()
