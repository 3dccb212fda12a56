"""The volumes sandboxd keeps: their records (the store) and their filesystems
(sandboxd.volumes.storage) made and removed together, their names' rules, their sizes, and the
tokens that open them to the content API.

Deleting a volume a sandbox has mounted is refused (`in_use`, which whoever mounts volumes in
sandboxes sets): E2B's API deletes it anyway and leaves the mounts to fail, a sandbox's files
vanishing under it; here the sandbox must end or unmount it first."""

from __future__ import annotations

import asyncio
import functools
import re
import uuid
from typing import TYPE_CHECKING

from sandboxd.errors import NotAllowed, VolumeNotFound, WrongState
from sandboxd.ids import now_us
from sandboxd.store.rows import DEFAULT_TEAM_ID, VolumeRow
from sandboxd.volumes.storage import MIN_SIZE_MB

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.store.interface import Store
    from sandboxd.volumes.storage import VolumeStorage
    from sandboxd.volumes.tokens import VolumeTokens

NAME = re.compile(r"^[a-zA-Z0-9_-]+$")  # the reference's rule
DEFAULT_SIZE_MB = 1024
MAX_SIZE_MB = 10240


def _never_in_use(_: str) -> bool:
    return False


class VolumeCatalog:
    """`size_mb`: each new volume's size unless its create asks for another of at most
    `max_size_mb`. `in_use(volume_id)`: whether a sandbox has it mounted."""

    def __init__(
        self,
        store: Store,
        storage: VolumeStorage,
        tokens: VolumeTokens,
        size_mb: int = DEFAULT_SIZE_MB,
        max_size_mb: int = MAX_SIZE_MB,
    ) -> None:
        self.store = store
        self.storage = storage
        self.tokens = tokens
        self.size_mb = size_mb
        self.max_size_mb = max(max_size_mb, size_mb)
        self.in_use: Callable[[str], bool] = _never_in_use
        self._changes = asyncio.Lock()  # a create's name check and its insert are one step

    def start(self) -> None:
        """Mount the recorded volumes a host reboot unmounted; remove what a stop cut short."""
        self.storage.ensure_mounted(v.volume_id for v in self.store.volumes())

    async def create(self, name: str, size_mb: int | None = None,
                     team_id: str = DEFAULT_TEAM_ID) -> VolumeRow:  # fmt: skip
        """Make the team's volume `name` of `size_mb` (None: the default size).

        Raises:
            NotAllowed: the name breaks the rule or the team has it, or the size is out of
                bounds.
            HostError, OSError: its filesystem could not be made.
        """
        if not NAME.match(name):
            raise NotAllowed("Invalid volume name")
        size = self.size_mb if size_mb is None else size_mb
        if not MIN_SIZE_MB <= size <= self.max_size_mb:
            raise NotAllowed(
                f"volume size must be between {MIN_SIZE_MB} and {self.max_size_mb} MiB"
            )
        async with self._changes:
            if self.store.volume_named(name, team_id) is not None:
                raise NotAllowed(f"Volume with name '{name}' already exists")
            row = VolumeRow(str(uuid.uuid4()), name, size, now_us(), team_id)
            await asyncio.to_thread(self.storage.create, row.volume_id, size)
            try:
                await self.store.write(functools.partial(self.store.add_volume, row))
            except BaseException:
                await asyncio.to_thread(self.storage.delete, row.volume_id)
                raise
        return row

    def get(self, volume_id: str, team_id: str | None = None) -> VolumeRow:
        """The volume (given a team, only one of the team's).

        Raises:
            VolumeNotFound: no such volume (of the team's), as for an unknown one.
        """
        row = self.store.volume(volume_id)
        if row is None or team_id not in (None, row.team_id):
            raise VolumeNotFound
        return row

    def named(self, name: str, team_id: str = DEFAULT_TEAM_ID) -> VolumeRow | None:
        return self.store.volume_named(name, team_id)

    def all(self, team_id: str | None = None) -> list[VolumeRow]:
        """Every volume, or the team's."""
        return self.store.volumes(team_id)

    async def delete(self, volume_id: str, team_id: str | None = None) -> None:
        """Remove the (team's) volume: its record, then its filesystem, nothing left of either.

        Raises:
            VolumeNotFound: no such volume (of the team's).
            WrongState: a sandbox has it mounted.
            OSError: its filesystem could not be unmounted (the record is gone already).
        """
        async with self._changes:
            row = self.get(volume_id, team_id)
            if self.in_use(volume_id):
                raise WrongState(f"Volume '{row.name}' is mounted in a sandbox")
            await self.store.write(functools.partial(self.store.delete_volume, volume_id))
            await asyncio.to_thread(self.storage.delete, volume_id)
