"""What a template's sandboxes boot: its read-only layers and how they start. The result of a
build (stored as JSON on the build and, for the default tag, on the template); the base
template's is its root filesystem booted by systemd."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxd.guest.commands import LOGIN_BASH, Command
from sandboxd.layers.portable import recorded, resolved
from sandboxd.runtime.spec import BootImage

if TYPE_CHECKING:
    from sandboxd.runtime.spec import Init

# A template's ENV that lets its sandboxes use io_uring, which every other sandbox is refused
# (docs/sandboxd.md, "System calls"): the one switch the SDKs' Template can set (set_envs).
IO_URING_ENV = "SANDBOXD_IO_URING"
DEFAULT_USER = "user"  # E2B's: the SDKs run commands as `user` in /home/user
DEFAULT_WORKDIR = "/home/user"


@dataclass(frozen=True)
class TemplateImage:
    layers: tuple[str, ...]  # lowest first
    init: Init = "systemd"  # a booted system, or envd as the container's program
    env: dict[str, str] = field(default_factory=dict)
    user: str = DEFAULT_USER
    workdir: str = DEFAULT_WORKDIR
    start_cmd: str | None = None
    ready_cmd: str | None = None

    @property
    def layer_paths(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.layers)

    @property
    def boot_image(self) -> BootImage:
        return BootImage(self.layer_paths, self.init, self.env.get(IO_URING_ENV) == "1")

    def command(self, script: str, user: str | None = None, cwd: str | None = None) -> Command:
        """`script` as the image runs it: in bash as a login shell, as E2B's builder and SDKs
        do (every image has a /bin/bash: provisioning adds one exec'ing /bin/sh where it has
        none), as `user` (default: the image's) in `cwd` (default: its workdir), with its env."""
        return Command(script, LOGIN_BASH, user or self.user, cwd or self.workdir, self.env)

    @property
    def start_command(self) -> Command | None:
        """The start command as its sandboxes run it; None without one."""
        return self.command(self.start_cmd) if self.start_cmd else None

    @property
    def ready_command(self) -> Command | None:
        """The ready command as its sandboxes run it; None without one."""
        return self.command(self.ready_cmd) if self.ready_cmd else None

    def key(self) -> str:
        """Equal for images whose sandboxes are alike (the warm pool's key)."""
        return json.dumps(self.to_json(), sort_keys=True)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["layers"] = list(self.layers)
        return data

    def record(self, root: Path) -> dict[str, Any]:
        """The image as a build's record keeps it: its layers' paths portable
        (sandboxd.layers.portable) from the state directory `root`."""
        data = self.to_json()
        data["layers"] = [recorded(p, root) for p in self.layers]
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any], root: Path) -> TemplateImage:
        """The image a build's record keeps, its layers resolved against the state directory
        `root` of this machine."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["layers"] = tuple(str(resolved(p, root)) for p in values["layers"])
        return cls(**values)

    @classmethod
    def of_rootfs(cls, rootfs: str, root: Path) -> TemplateImage:
        """A template that is one root filesystem booted by systemd (base, and templates made
        over it by `POST /v2/templates`), as a template's record keeps it (`rootfs`)."""
        return cls((str(resolved(rootfs, root)),))
