"""What one sandbox is made of on the host, frozen when it is claimed: its image's read-only
layers and init, its limits, its uid range, its disk size, its network slot and the host
directories mounted into it. Written whole as
the sandbox's record before anything of it is made, so that every undo (a failed boot, a kill, a
retried kill, the leftovers an adopting sandboxd finds) is driven by the same record, and an
adopted sandbox is exactly what was booted."""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sandboxd.errors import SandboxError
from sandboxd.host.cgroups import Limits
from sandboxd.network.slots import NetSlot

if TYPE_CHECKING:
    from collections.abc import Sequence

RECORD = "sandbox.json"

Init = Literal["systemd", "envd"]
INITS: tuple[Init, ...] = ("systemd", "envd")


@dataclass(frozen=True)
class BootImage:
    """What a sandbox boots: read-only root filesystem layers, lowest first, and how its envd
    starts. `init` "systemd": the image's systemd boots, envd a systemd unit (our templates);
    "envd": no systemd in the image, envd from its layer is the sandbox's program (under
    nspawn, its stub init's: sandboxd.runtime.nspawn.container), for images that are not
    ours."""

    layers: tuple[Path, ...]
    init: Init = "systemd"
    io_uring: bool = False  # io_uring's system calls allowed (off unless a template asks)


@dataclass(frozen=True)
class VolumeMount:
    """A host directory mounted read-write at `path_inside` (absolute, normalised, not `/`),
    its files' ids 0..65535 shown as the sandbox's own (as its template's layers are): what is
    stored on the host keeps the same ids whichever sandbox wrote it."""

    host_dir: Path
    path_inside: str


def mount_path_problem(path: str) -> str | None:
    """Why `path` cannot be where a volume is mounted inside a sandbox, or None (the
    reference's reasons, infra's `isValidMountPath`, and the root, which it lets through)."""
    if not path:
        return "path cannot be empty"
    if not path.startswith("/"):
        return "path must be absolute"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return "path must not contain any '.' or '..' components"
    if path == "/":
        return "path cannot be the root directory"
    return None


def check_mounts(mounts: Sequence[VolumeMount]) -> None:
    """Raises SandboxError for a mount whose path inside is not one or is used twice, or whose
    host directory is not an absolute path of a directory."""
    seen: set[str] = set()
    for mount in mounts:
        if problem := mount_path_problem(mount.path_inside) or (
            "the path is used twice" if mount.path_inside in seen else None
        ):
            raise SandboxError(f"volume mount at {mount.path_inside!r}: {problem}")
        if not mount.host_dir.is_absolute() or not mount.host_dir.is_dir():
            raise SandboxError(f"volume mount from {mount.host_dir}: not a directory")
        seen.add(mount.path_inside)


@dataclass(frozen=True)
class SandboxSpec:
    """One sandbox, as its record has it."""

    id: str
    layers: tuple[Path, ...]  # read-only root filesystems, lowest first
    limits: Limits
    uid_base: int
    disk_mb: int  # the writable layer's size; 0: no limit
    net: NetSlot | None = None  # None: only a loopback (serve without --network-pool)
    init: Init = "systemd"
    io_uring: bool = False
    mounts: tuple[VolumeMount, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        data["layers"] = [str(p) for p in self.layers]
        data["mounts"] = [[str(m.host_dir), m.path_inside] for m in self.mounts]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> SandboxSpec:
        """Raises ValueError, KeyError or TypeError for a record that is not one."""
        data = json.loads(text)
        return cls(
            data["id"],
            tuple(Path(p) for p in data["layers"]),
            Limits(**data["limits"]),
            int(data["uid_base"]),
            int(data["disk_mb"]),
            None if data.get("net") is None else _slot(data["net"]),
            _init(data.get("init", "systemd")),  # records from before init modes: systemd
            data.get("io_uring") is True,
            tuple(VolumeMount(Path(host), str(inside)) for host, inside in data.get("mounts", [])),
        )


@dataclass(frozen=True)
class Leftover:
    """What is known of a sandbox found without a readable record (a directory or cgroups a
    boot left before its record was written, or whose record is gone): its id, nothing of what
    it was made of; no uid range and no network were claimed for it."""

    id: str
    net: None = None


def _init(value: object) -> Init:
    for init in INITS:
        if value == init:
            return init
    raise ValueError(f"unknown init {value!r}")


def _slot(data: dict[str, Any]) -> NetSlot:
    """A record's slot; fields a slot no longer has (`dns`, before the DNS forwarder) left out,
    so that sandboxes booted before are still adopted."""
    known = {f.name for f in fields(NetSlot)}
    return NetSlot(**{k: v for k, v in data.items() if k in known})


def write_record(box_dir: Path, spec: SandboxSpec) -> None:
    """Write the record atomically (a crash leaves the old one or the new one)."""
    tmp = box_dir / f".{RECORD}.new"
    with open(tmp, "w") as f:
        f.write(spec.to_json())
        f.flush()
        os.fsync(f.fileno())
    tmp.rename(box_dir / RECORD)


def read_record(box_dir: Path) -> SandboxSpec | None:
    """The sandbox's spec, or None when it has no readable record."""
    try:
        return SandboxSpec.from_json((box_dir / RECORD).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
