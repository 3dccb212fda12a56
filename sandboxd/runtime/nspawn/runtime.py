"""The nspawn engine behind the runtime protocol (sandboxd.runtime.engine): boot a template into
a sandbox, freeze and thaw it, read its usage and logs, export its writable layer, kill it, and
adopt the running ones after a restart.

Each sandbox is `SANDBOXES_DIR/ID` (its record, disk, layers, overlay root and console log),
the cgroups `PARENT/ID` in every hierarchy and the claim of its uid range; nothing else on the
host is made, and nothing of the host is bound into it but the volumes it is given. Its record
(sandboxd.runtime.spec) says what it is made of and drives every undo
(sandboxd.runtime.nspawn.steps). The cgroup tree and the directory are the whole truth: a new
`NspawnRuntime` on the same directory finds every sandbox again with `adopt()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from sandboxd.errors import BootError, HostError, SandboxError, TeardownError
from sandboxd.host import uid_ranges
from sandboxd.host.cgroups import CgroupHost, Limits, SandboxCgroups, Usage, existing_sandboxes
from sandboxd.host.removal import mounts_under, remove_tree
from sandboxd.host.sysctl import ensure_host_limits
from sandboxd.ids import is_sandbox_id
from sandboxd.network import resolv_conf, sweep
from sandboxd.runtime.nspawn import container, journal, readiness, stopped
from sandboxd.runtime.nspawn.box import NspawnBox, own, running
from sandboxd.runtime.nspawn.export import layer_from_upper
from sandboxd.runtime.nspawn.steps import (
    SandboxDirs,
    boot_steps,
    make_all,
    undo_all,
    written_by_sandboxd,
)
from sandboxd.runtime.spec import (
    RECORD,
    Leftover,
    SandboxSpec,
    check_mounts,
    read_record,
    write_record,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from pathlib import Path

    from sandboxd.network.egress_proxy.server import EgressProxy
    from sandboxd.network.slots import NetworkPool
    from sandboxd.runtime.dialer import ReadinessProbe
    from sandboxd.runtime.engine import Box, LogEntry
    from sandboxd.runtime.spec import BootImage, VolumeMount

log = logging.getLogger("sandboxd.runtime.nspawn.runtime")

DISK_IMAGES = "disk-images"


class NspawnRuntime:
    """Sandboxes under `sandboxes_dir`, with cgroups under `cgroup_parent` in each hierarchy.
    `probe` says whether a sandbox's guest agent serves yet, `guest_unit` names its systemd
    unit (both from sandboxd.guest: the engine knows nothing of what runs inside).

    Two of them must not share a directory or a cgroup parent at the same time (a restarted
    sandboxd adopts its predecessor's sandboxes; it does not run beside it).
    """

    def __init__(
        self,
        sandboxes_dir: Path,
        cgroup_parent: str = "sandboxd",
        boot_timeout_s: float = 30,
        network: NetworkPool | None = None,
        egress_proxy: EgressProxy | None = None,
        *,
        probe: ReadinessProbe,
        guest_unit: str,
    ) -> None:
        self.sandboxes_dir = sandboxes_dir.absolute()
        self.cgroup_parent = cgroup_parent
        self.boot_timeout_s = boot_timeout_s
        self.probe = probe
        self.guest_unit = guest_unit
        self.network = network  # None: each sandbox has only its loopback
        self.egress_proxy = egress_proxy  # None: domains in allowOut allow nothing
        self.host = CgroupHost.detect()
        ensure_host_limits()
        # Beside the sandboxes, not among them: adopt() reads every entry there as a sandbox.
        self.steps = boot_steps(
            self.host, cgroup_parent, self.sandboxes_dir.parent / DISK_IMAGES, guest_unit
        )

    def _cgroups(self, sandbox_id: str) -> SandboxCgroups:
        return SandboxCgroups(self.host, self.cgroup_parent, sandbox_id)

    def _dirs(self, sandbox_id: str) -> SandboxDirs:
        return SandboxDirs(self.sandboxes_dir / sandbox_id)

    async def boot(self, sandbox_id: str, image: BootImage, limits: Limits | None = None,
                   disk_mb: int = 0, mounts: Sequence[VolumeMount] = ()) -> NspawnBox:  # fmt: skip
        """Boot `image` (read-only layers and how envd starts in them) as sandbox `sandbox_id`,
        in a user namespace of a uid range of its own, with a writable layer of `disk_mb` (0: no
        limit) and `mounts` (sandboxd.runtime.nspawn.steps.Volumes); return once `probe` finds
        its guest agent ready.

        Raises:
            SandboxError: the id is malformed or already in use, or a mount's path is not one
                (nothing was touched).
            TemplateError: `image` lacks what its init needs (nothing is left behind).
            BootError: the sandbox did not come up within `boot_timeout_s`, or nspawn exited;
                everything the boot made has been removed.
        """
        started = time.monotonic()
        image = self._claim(sandbox_id, image, disk_mb, mounts)
        launch = asyncio.ensure_future(
            asyncio.to_thread(self._launch, sandbox_id, image, limits or Limits(), disk_mb, mounts)
        )
        try:
            spec = await asyncio.shield(launch)
            box = await self._await_boot(spec, started)
        except BaseException as exc:
            # A cancelled boot must not clean up while the launch thread (which cannot be
            # interrupted) may still start nspawn afterwards.
            with contextlib.suppress(Exception):
                await launch
            await self._teardown_after_failure(sandbox_id)
            if isinstance(exc, SandboxError | asyncio.CancelledError | KeyboardInterrupt):
                raise
            raise BootError(f"sandbox {sandbox_id} did not boot: {exc}") from exc
        log.info("sandbox %s up in %.2f s", sandbox_id, time.monotonic() - started)
        return box

    def _claim(
        self, sandbox_id: str, image: BootImage, disk_mb: int, mounts: Sequence[VolumeMount]
    ) -> BootImage:
        """Check the id, image and mounts and make the sandbox's directory: the claim that makes
        one boot per id. Returns the image with its layers' absolute paths."""
        if not is_sandbox_id(sandbox_id):
            raise SandboxError(f"sandbox id {sandbox_id!r}: only a-z and 0-9, 1 to 63 of them")
        if disk_mb < 0:
            raise SandboxError(f"disk size {disk_mb} MiB: 0 (no limit) or more")
        check_mounts(mounts)
        image = dataclasses.replace(image, layers=tuple(p.absolute() for p in image.layers))
        container.require_rootfs(image)
        box_dir = self.sandboxes_dir / sandbox_id
        self.sandboxes_dir.mkdir(parents=True, exist_ok=True)
        try:
            box_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise SandboxError(f"sandbox {sandbox_id} already exists") from None
        if self._cgroups(sandbox_id).exists():
            box_dir.rmdir()
            raise SandboxError(f"sandbox {sandbox_id} already has cgroups (not adopted?)")
        return image

    def _launch(self, sandbox_id: str, image: BootImage, limits: Limits, disk_mb: int,
                mounts: Sequence[VolumeMount]) -> SandboxSpec:  # fmt: skip
        """Claim a uid range and write the record (what every undo is driven by) under the
        claims' lock, then every host step in order (sandboxd.runtime.nspawn.steps). Off the event loop:
        the claim reads the other sandboxes' records and the record is fsynced. Returns the
        spec."""
        record = self._dirs(sandbox_id).dir / RECORD

        def recorded(uid_base: int) -> SandboxSpec:
            net = self.network.slot(uid_base) if self.network else None
            spec = SandboxSpec(sandbox_id, image.layers, limits, uid_base, disk_mb, net,
                               image.init, image.io_uring, tuple(mounts))  # fmt: skip
            write_record(record.parent, spec)
            return spec

        spec = uid_ranges.claim(record, _holds_range, recorded)
        make_all(self.steps, spec, self._dirs(sandbox_id))
        return spec

    async def _await_boot(self, spec: SandboxSpec, started: float) -> NspawnBox:
        return await readiness.await_boot(spec, self._dirs(spec.id), self._cgroups(spec.id), self.probe,
                                          self.guest_unit, started, self.boot_timeout_s)  # fmt: skip

    async def _teardown_after_failure(self, sandbox_id: str) -> None:
        try:
            await asyncio.to_thread(self._teardown, sandbox_id)
        except SandboxError:
            log.exception("sandbox %s: cleaning up after a failed boot left something", sandbox_id)

    async def freeze(self, box: Box, timeout_s: float = 5) -> None:
        """Freeze the container (its processes keep their memory, get no CPU, answer nothing);
        nspawn itself stays responsive. Returns once the kernel reports it frozen.

        Raises:
            SandboxError: the container is gone, or did not freeze within `timeout_s`.
        """
        await self._set_frozen(box, True, timeout_s)

    async def thaw(self, box: Box, timeout_s: float = 5) -> None:
        """Undo `freeze`: the processes continue where they stopped.

        Raises:
            SandboxError: the container is gone, or did not thaw within `timeout_s`.
        """
        await self._set_frozen(box, False, timeout_s)

    async def _set_frozen(self, box: Box, frozen: bool, timeout_s: float) -> None:
        what = "freeze" if frozen else "thaw"
        try:
            box.cgroups.set_frozen(frozen)
            deadline = time.monotonic() + timeout_s
            while box.cgroups.frozen() != frozen:
                if time.monotonic() > deadline:
                    raise SandboxError(f"sandbox {box.id} did not {what} in {timeout_s:g} s")
                await asyncio.sleep(0.0005)
        except FileNotFoundError:
            raise SandboxError(f"cannot {what} sandbox {box.id}: it is gone") from None

    async def kill(self, box: Box) -> None:
        """End the sandbox at once and remove everything it had: processes (cgroup.kill, frozen
        or not), nspawn's leftovers, its mounts and disk, its cgroups, its directory and the
        claim of its uid range.

        Raises:
            TeardownError: something could not be removed; calling `kill` again retries.
        """
        self.release(box)
        if self.egress_proxy is not None and box.spec.net is not None:
            self.egress_proxy.forget(box.spec.net)
        await asyncio.to_thread(self._teardown, box.id)

    def _teardown(self, sandbox_id: str) -> None:
        """Undo every host step from the sandbox's record (or, for a directory without one,
        what can be undone knowing only the id), then remove the directory and the record in
        it, and last the claim of the uid range the record held."""
        dirs = self._dirs(sandbox_id)
        spec = read_record(dirs.dir) or Leftover(sandbox_id)
        undo_all(self.steps, spec, dirs)
        if left := mounts_under(dirs.dir):
            raise TeardownError(f"sandbox {sandbox_id}: still mounted: {', '.join(left)}")
        remove_tree(dirs.dir)
        if isinstance(spec, SandboxSpec):
            uid_ranges.release(dirs.dir / RECORD, spec.uid_base)

    def release(self, box: Box) -> None:
        """Close the sandbox's pinned network namespace; the sandbox runs on."""
        own(box).netns.close()

    def adopt(self, keep: Collection[str] = ()) -> list[NspawnBox]:
        """The sandboxes a previous sandboxd left running (frozen ones included), found from
        the cgroup tree and the sandboxes directory. Leftovers of sandboxes that are no longer
        running (nspawn gone, half-made boots) are removed, but of those in `keep` (with a
        record) the files stay (sandboxd.runtime.nspawn.stopped), for `export_stopped`.

        Call once at startup, before any boot.
        """
        ids = set(existing_sandboxes(self.host, self.cgroup_parent))
        if self.sandboxes_dir.is_dir():
            ids.update(p.name for p in self.sandboxes_dir.iterdir() if is_sandbox_id(p.name))
        boxes: list[NspawnBox] = []
        for sandbox_id in sorted(ids):
            dirs = self._dirs(sandbox_id)
            spec = read_record(dirs.dir)
            box = None if spec is None else running(spec, dirs.dir, self._cgroups(sandbox_id))
            if box is not None:
                boxes.append(box)
                continue
            kept = spec is not None and sandbox_id in keep
            log.warning("sandbox %s is not running: removing what is left of it%s", sandbox_id,
                        " but its files" if kept else "")  # fmt: skip
            try:
                if kept and spec is not None:
                    stopped.keep_files(self.steps, spec, dirs)
                else:
                    self._teardown(sandbox_id)
            except SandboxError:
                log.exception("sandbox %s: could not remove its leftovers", sandbox_id)
        return boxes

    def export_stopped(self, sandbox_id: str, dest: Path) -> SandboxSpec:
        """The writable layer of a sandbox whose files `adopt` kept written into `dest` (as
        `export_diff`); its record. Blocking. Raises as sandboxd.runtime.nspawn.stopped's."""
        excluded = written_by_sandboxd(self.guest_unit)
        return stopped.export_stopped(self._dirs(sandbox_id), dest, excluded)

    def remove_stopped(self, sandbox_id: str) -> None:
        """Remove what `adopt` kept of a stopped sandbox. Raises TeardownError as `kill`."""
        self._teardown(sandbox_id)

    def sweep_network(self) -> None:
        """Remove what of sandboxes' networks serve's namespace holds that no record accounts
        for (sandboxd.network.sweep); nothing without a network. After `adopt`, before any
        boot.

        Raises:
            TeardownError: something would not go.
        """
        if self.network is None or not self.sandboxes_dir.is_dir():
            return
        records = (read_record(d) for d in self.sandboxes_dir.iterdir() if is_sandbox_id(d.name))
        sweep.sweep({spec.net for spec in records if spec is not None and spec.net is not None})

    def stats(self, box: Box) -> Usage:
        """CPU time, memory charged and process count of the whole sandbox.

        Raises SandboxError: the sandbox is gone."""
        try:
            return box.cgroups.usage()
        except FileNotFoundError:
            raise SandboxError(f"sandbox {box.id} is gone") from None

    def set_limits(self, box: Box, limits: Limits) -> None:
        """Change the limits of a running sandbox (and its record).

        Raises:
            OSError: the kernel refused a limit (e.g. memory below what the sandbox uses).
        """
        if limits == box.limits:  # a warm sandbox taken for its own template: nothing to do
            return
        box.cgroups.set_limits(limits)
        box.spec = dataclasses.replace(box.spec, limits=limits)
        write_record(box.dir, box.spec)

    def set_resolvers(self, box: Box, nameservers: list[str] | None) -> None:
        """Name `nameservers` in the sandbox's /etc/resolv.conf (None: its gateway, serve's DNS
        forwarder); nothing without a network.

        Raises:
            HostError: the file could not be written (the sandbox's /etc is not a directory).
        """
        if box.spec.net is None:
            return
        root = SandboxDirs(box.dir).root
        try:
            resolv_conf.rewrite(root, nameservers or [box.spec.net.host_ip], box.uid_base)
        except OSError as e:
            raise HostError(f"sandbox {box.id}: cannot write its resolv.conf: {e}") from e

    def export_diff(self, box: Box, dest: Path) -> Path:
        """The sandbox's upper directory written into the empty directory `dest` (returned),
        owned as template layers are, without what the boot steps wrote into it
        (sandboxd.runtime.nspawn.export). The sandbox must be frozen. Blocking.

        Raises:
            TemplateError: an entry belongs to an id outside the sandbox's range, or carries an
                overlayfs redirect or metacopy.
        """
        excluded = written_by_sandboxd(self.guest_unit)
        layer_from_upper(SandboxDirs(box.dir).upper, box.uid_base, dest, excluded)
        return dest

    async def logs(
        self, box: Box, since_us: int | None, until_us: int | None, limit: int, newest_first: bool
    ) -> list[LogEntry]:
        """At most `limit` entries of the sandbox's journal in [since_us, until_us], oldest
        first, or newest first.

        Raises:
            HostError: journalctl is missing.
            SandboxError: the sandbox is gone or its journal cannot be read in time.
        """
        return await journal.read(own(box), since_us, until_us, limit, newest_first)


def _holds_range(record: Path, uid_base: int) -> bool:
    """Whether the sandbox record at `record` still holds uid range `uid_base`."""
    spec = read_record(record.parent)
    return spec is not None and spec.uid_base == uid_base
