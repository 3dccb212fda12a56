"""systemd as the init of a template built from an image that is not ours, as E2B boots every
template: its builder installs systemd (and the rest of its package set) into each image with the
image's own package manager. Here, in a build sandbox of the image as pulled and provisioned
(envd its program, the build's network and log), apt installs what of PACKAGES the image lacks,
and the boot is slimmed as the base template's (sandboxd.builds.base_image: the same masked units,
generators and tmpfiles entries, volatile journal) with envd enabled as a unit from its layer.
The sandbox's writable layer becomes a layer of its own, cached by the image's key, PACKAGES and
VERSION, and the template boots with systemd as PID 1 (`init` "systemd").

`serve --provision` chooses: `systemd` (a build that cannot fails), `envd` (never: envd is the
container's program), `auto` (the default, as E2B: systemd where the image can take it; an
image without apt, or whose install fails, for instance without a network, keeps envd as its
program, and the build's log says why)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from typing import TYPE_CHECKING, Final, Literal

from sandboxd.builds.base_image import (
    MANAGER_CONF,
    MASKED_UNITS,
    NO_CREDENTIALS,
    NO_CREDENTIALS_DROPIN,
    NO_TMPFILES,
    VOLATILE_JOURNAL,
    packaging_dir,
)
from sandboxd.builds.envd_layer import UNIT_DIR
from sandboxd.builds.provision import SUDOERS, SUDOERS_LINE
from sandboxd.errors import SandboxError
from sandboxd.layers import layer_view

if TYPE_CHECKING:
    from sandboxd.builds.build_log import BuildLog
    from sandboxd.builds.build_run import Context
    from sandboxd.templates.image import TemplateImage

Provision = Literal["auto", "systemd", "envd"]
PROVISIONS: Final[tuple[Provision, ...]] = ("auto", "systemd", "envd")
# E2B's set (its builder's provision.sh) less what a sandbox here does without (ssh, chrony,
# NFS, FUSE, the firewall tools): systemd to boot, D-Bus as base has it (masked at boot, there
# for a template's own units), sudo for the SDKs' root commands, and the tools of the SDKs'
# ready commands (`ss`, `pgrep`, curl).
PACKAGES: Final = ("systemd", "systemd-sysv", "dbus", "sudo", "iproute2", "procps",
                   "ca-certificates", "curl")  # fmt: skip
VERSION: Final = "1"  # a change to what the script writes makes new layers
APT = "/usr/bin/apt-get"
STEP = "base"


class NoSystemd(Exception):
    """The image cannot boot with systemd here; the message says why."""


async def with_systemd(
    image: TemplateImage, key: str, mode: Provision, ctx: Context, log: BuildLog
) -> tuple[TemplateImage, str]:
    """`image` (keyed `key`, booted by envd) and its key, booted by systemd where `mode` and
    the image allow, else as it is.

    Raises:
        NoSystemd: `mode` is "systemd" and the image cannot take it.
    """
    if mode == "envd":
        log.add("provision: envd is the image's program (serve --provision envd)", step=STEP)
        return image, key
    try:
        layer = await _systemd_layer(image, key, ctx, log)
    except NoSystemd as exc:
        if mode == "systemd":
            raise
        log.add(f"provision: {exc}: envd stays the image's program, without systemd", step=STEP)
        return image, key
    booted = dataclasses.replace(image, layers=(*image.layers, layer), init="systemd")
    return booted, f"{key}+systemd:{layer}"


async def _systemd_layer(image: TemplateImage, key: str, ctx: Context, log: BuildLog) -> str:
    """The path of the image's systemd layer, made unless cached. Raises NoSystemd."""
    if layer_view.resolve(image.layer_paths, APT) is None:
        raise NoSystemd(f"the image has no {APT} (only apt images get systemd so far)")
    data = {"image": key, "packages": PACKAGES, "version": VERSION}
    name = "sysd-" + hashlib.sha256(json.dumps(data).encode()).hexdigest()[:32]
    if (cached := ctx.layers.find(name)) is not None:
        log.add(f"CACHED provision: systemd ({', '.join(PACKAGES)})", step=STEP)
        return str(cached)
    log.add(f"provision: systemd ({', '.join(PACKAGES)}) with apt-get", step=STEP)

    def output(stream: str, data: bytes) -> None:
        log.output(stream, data, STEP)

    command = image.command(_script(), "root", "/")
    try:
        async with ctx.sandboxes.booted(image, ctx.limits, ctx.disk_mb) as box:
            try:
                code = await ctx.sandboxes.run(box, command, output)
            finally:
                log.end_output(STEP)
            if code != 0:
                raise NoSystemd(f"installing systemd with apt-get exited with code {code}")
            await ctx.sandboxes.snapshot(box, ctx.layers, name)
    except (SandboxError, OSError) as exc:
        raise NoSystemd(f"installing systemd: {exc}") from exc
    return str(ctx.layers.path(name))


_SCRIPT = """set -e
need=
for p in {packages}; do
  dpkg-query -W -f '${{db:Status-Status}}' "$p" 2>/dev/null | grep -qx installed || need="$need $p"
done
if [ -n "$need" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends $need
  apt-get clean
  rm -rf /var/lib/apt/lists/*
fi
units=/etc/systemd/system
mkdir -p $units/multi-user.target.wants $units/envd.service.d /etc/systemd/system-generators \
  /etc/tmpfiles.d /etc/systemd/system.conf.d /etc/systemd/journald.conf.d
for u in {masked}; do ln -sfn /dev/null $units/$u; done
for g in /lib/systemd/system-generators/* /usr/lib/systemd/system-generators/*; do
  if [ -e "$g" ]; then ln -sfn /dev/null "/etc/systemd/system-generators/${{g##*/}}"; fi
done
for e in {no_tmpfiles}; do ln -sfn /dev/null /etc/tmpfiles.d/$e; done
for u in {no_credentials}; do
  mkdir -p $units/$u.d && printf %s {dropin} > $units/$u.d/sandbox.conf
done
printf %s {manager} > /etc/systemd/system.conf.d/sandbox.conf
printf %s {journal} > /etc/systemd/journald.conf.d/volatile.conf
printf %s {isnotfc} > $units/envd.service.d/isnotfc.conf
ln -sfn {unit_dir}/envd.service $units/multi-user.target.wants/envd.service
if [ -x /usr/bin/sudo ]; then printf %s {sudoers_line} > {sudoers}; chmod 0440 {sudoers}; fi
"""


def _script() -> str:
    """Install what of PACKAGES is missing, then the base template's slim boot and envd's unit
    enabled (as `install.sh --enable` and base_image.install_envd do), sudo for `user`."""
    q = shlex.quote
    return _SCRIPT.format(
        packages=" ".join(PACKAGES), masked=" ".join(MASKED_UNITS),
        no_tmpfiles=" ".join(NO_TMPFILES), no_credentials=" ".join(NO_CREDENTIALS),
        dropin=q(NO_CREDENTIALS_DROPIN), manager=q(MANAGER_CONF), journal=q(VOLATILE_JOURNAL),
        isnotfc=q((packaging_dir() / "isnotfc.conf").read_text()), unit_dir=UNIT_DIR,
        sudoers_line=q(SUDOERS_LINE), sudoers=SUDOERS,
    )  # fmt: skip
