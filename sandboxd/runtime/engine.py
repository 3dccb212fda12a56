"""What runs sandboxes, whatever the engine: the `Runtime` protocol everything above the runtime
types against, and `Box`, its handle of one running (or frozen) sandbox. An engine's own state
of a sandbox (for nspawn: its pids and pinned network namespace) stays in its own subclass of
`Box` (sandboxd.runtime.nspawn.runtime.NspawnBox), out of reach of callers above."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sandboxd.runtime.spec import BootImage

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from pathlib import Path

    from sandboxd.host.cgroups import Limits, SandboxCgroups, Usage
    from sandboxd.network.egress_proxy.server import EgressProxy
    from sandboxd.network.slots import NetSlot
    from sandboxd.runtime.dialer import Dialer
    from sandboxd.runtime.spec import SandboxSpec, VolumeMount


@dataclass
class Box:
    """One running (or frozen) sandbox: what it was made of (`spec`, as its record has it), its
    directory, its cgroups, and `dialer`, the only way to its ports. Owned by the runtime that
    booted or adopted it; `Runtime.kill` ends it, `Runtime.release` lets go of it."""

    spec: SandboxSpec
    dir: Path
    cgroups: SandboxCgroups
    dialer: Dialer

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def image(self) -> BootImage:
        return BootImage(self.spec.layers, self.spec.init, self.spec.io_uring)

    @property
    def limits(self) -> Limits:
        return self.spec.limits

    @property
    def uid_base(self) -> int:
        return self.spec.uid_base

    @property
    def net(self) -> NetSlot | None:
        return self.spec.net

    @property
    def mounts(self) -> tuple[VolumeMount, ...]:
        return self.spec.mounts

    @property
    def frozen(self) -> bool:
        return self.cgroups.frozen()


@dataclass(frozen=True)
class LogEntry:
    """One line of a sandbox's log."""

    timestamp_us: int
    level: str
    logger: str  # envd's logger, or the process that wrote it (systemd, envd, ...)
    message: str


class Runtime(Protocol):
    """Boots images into sandboxes and runs them. The engines: sandboxd.runtime.nspawn."""

    @property
    def sandboxes_dir(self) -> Path:
        """Each sandbox's directory is `sandboxes_dir/ID`, its record in it."""
        ...

    @property
    def egress_proxy(self) -> EgressProxy | None:
        """serve's domain proxy, if it has one (sandboxd.network.egress_proxy)."""
        ...

    async def boot(
        self,
        sandbox_id: str,
        image: BootImage,
        limits: Limits | None = None,
        disk_mb: int = 0,
        mounts: Sequence[VolumeMount] = (),
    ) -> Box:
        """Boot `image` as sandbox `sandbox_id` with a writable layer of `disk_mb` (0: no
        limit) and each of `mounts`' host directories read-write at its path inside, its
        files' ids 0..65535 the sandbox's own there; return once its guest agent is ready.

        Raises:
            SandboxError: the id is malformed or already in use, or a mount's path is not one
                (nothing was touched).
            TemplateError: `image` lacks what its init needs (nothing is left behind).
            BootError: the sandbox did not come up; everything the boot made is removed.
        """
        ...

    async def freeze(self, box: Box, timeout_s: float = 5) -> None:
        """Stop the sandbox's processes where they are (memory kept, no CPU).

        Raises:
            SandboxError: the sandbox is gone, or did not freeze within `timeout_s`.
        """
        ...

    async def thaw(self, box: Box, timeout_s: float = 5) -> None:
        """Undo `freeze`. Raises SandboxError as `freeze`."""
        ...

    async def kill(self, box: Box) -> None:
        """End the sandbox at once and remove everything it had.

        Raises:
            TeardownError: something could not be removed; calling `kill` again retries.
        """
        ...

    def release(self, box: Box) -> None:
        """Let go of a sandbox that keeps running (serve stopping: the next one adopts it)."""
        ...

    def adopt(self, keep: Collection[str] = ()) -> Sequence[Box]:
        """The sandboxes a previous sandboxd left running; the leftovers of the others removed,
        but the files of those in `keep` (whose processes a crash or a reboot ended) left for
        `export_stopped`. Call once at startup, before any boot. Blocking."""
        ...

    def export_stopped(self, sandbox_id: str, dest: Path) -> SandboxSpec:
        """The writable layer of a sandbox whose files `adopt` kept written into `dest` (as
        `export_diff`); the record of what it booted. Blocking.

        Raises:
            SandboxError: nothing of it is left (HostError: its disk would not mount);
                TemplateError: as `export_diff`.
        """
        ...

    def remove_stopped(self, sandbox_id: str) -> None:
        """Remove what `adopt` kept of a sandbox. Raises TeardownError as `kill`."""
        ...

    def sweep_network(self) -> None:
        """Remove networks no sandbox's record accounts for. After `adopt`, before any boot.

        Raises:
            TeardownError: something would not go.
        """
        ...

    def stats(self, box: Box) -> Usage:
        """The sandbox's usage. Raises SandboxError: the sandbox is gone."""
        ...

    def set_limits(self, box: Box, limits: Limits) -> None:
        """Change a running sandbox's limits (and its record).

        Raises:
            OSError: the kernel refused a limit (e.g. memory below what the sandbox uses).
        """
        ...

    def set_resolvers(self, box: Box, nameservers: list[str] | None) -> None:
        """Name `nameservers` in the sandbox's /etc/resolv.conf (None: its gateway, serve's DNS
        forwarder); nothing without a network. Blocking.

        Raises:
            HostError: the file could not be written.
        """
        ...

    def export_diff(self, box: Box, dest: Path) -> Path:
        """The sandbox's writable layer (what it changed of its image) written into `dest`, an
        empty directory the layer store made for the new layer (`LayerStore.add`), returned:
        what a snapshot, a pause to disk and a build step keep. The sandbox must be frozen.
        Blocking.

        Raises:
            TemplateError: the layer holds what a layer cannot.
        """
        ...

    async def logs(
        self, box: Box, since_us: int | None, until_us: int | None, limit: int, newest_first: bool
    ) -> list[LogEntry]:
        """At most `limit` lines of the sandbox's log in [since_us, until_us], oldest first, or
        newest first.

        Raises:
            HostError: what reads logs is missing.
            SandboxError: the sandbox is gone or its log cannot be read in time.
        """
        ...
