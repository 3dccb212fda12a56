"""One build, start to end: the base, each step (a cached layer, or a new one made in a build
sandbox or, for COPY, from the upload on the host), and the finalize phase, which boots the
result and checks its start and ready commands. The log says what happened at each step; a
failure ends the build with the step E2B's `reason.step` names (`base`, `1`.., `finalize`).

Each layer is keyed by a hash of the layer below (the base's key, or the layer's name) and the
step, with the env, user and workdir the step runs with and, for COPY, its upload's hash: an
unchanged prefix of steps is found again; `force` (the build's, or a step's, from that step on)
makes them anew, as new layers (a template made before keeps its own), which later builds then
find for those keys."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shlex
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.builds import step_layers
from sandboxd.builds.copy_layer import copy_to_layer, parse_mode
from sandboxd.errors import SandboxError, StorageFull, TemplateError
from sandboxd.guest.start_cmd import start_and_wait
from sandboxd.host.removal import remove_tree
from sandboxd.layers import layer_view

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.builds.base_phase import Base
    from sandboxd.builds.build_log import BuildLog
    from sandboxd.builds.build_sandbox import BuildSandboxes
    from sandboxd.builds.recipe import Recipe, Step
    from sandboxd.builds.uploads import Uploads
    from sandboxd.guest.commands import Command
    from sandboxd.host.cgroups import Limits
    from sandboxd.layers.quota import StorageQuota
    from sandboxd.layers.store import LayerStore
    from sandboxd.runtime.engine import Box
    from sandboxd.templates.image import TemplateImage


class StepFailed(TemplateError):
    """A step (or the base, or finalize) failed; `step` is how `reason.step` names it."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True)
class Context:
    """What a build runs with besides its recipe."""

    layers: LayerStore
    uploads: Uploads
    sandboxes: BuildSandboxes
    limits: Limits
    disk_mb: int
    storage: StorageQuota | None = None  # the quota of uploads and layers; None: none


async def run_steps(recipe: Recipe, base: Base, ctx: Context, log: BuildLog) -> TemplateImage:
    """The image the recipe's steps make over `base`. Raises StepFailed."""
    image, parent = base.image, base.key
    forced = recipe.force
    for number, step in enumerate(recipe.steps, 1):
        label = str(number)
        forced = forced or step.force
        described = f"[{number}/{len(recipe.steps)}] {step.type} {' '.join(step.args)}"
        if step.type == "ENV":
            env = dict(zip(step.args[::2], step.args[1::2], strict=True))
            image = dataclasses.replace(image, env={**image.env, **env})
            log.add(described, step=label)
            continue
        if _nothing_to_make(step, image):  # a USER the image has, a WORKDIR that exists
            image = _after(step, image)
            log.add(described, step=label)
            continue
        key = _key(parent, step, image)
        name = None if forced else step_layers.latest(ctx.layers, key)
        if name is not None:
            log.add(f"CACHED {described}", step=label)
        else:
            log.add(described, step=label)
            name = step_layers.fresh_name(ctx.layers, key)
            try:
                await _within_quota(ctx, "a new layer", None)
                await _make_layer(step, image, ctx, log, label, name)
                await _within_quota(ctx, "its layer", ctx.layers.path(name))
            except StepFailed:
                raise
            except (SandboxError, OSError) as exc:
                raise StepFailed(label, f"{_what_failed(step, number)}: {exc}") from exc
            await asyncio.to_thread(step_layers.point, ctx.layers, key, name)
        parent = name  # the next step's key names the layer below it, a forced one's included
        image = dataclasses.replace(image, layers=(*image.layers, str(ctx.layers.path(name))))
        image = _after(step, image)
    return dataclasses.replace(image, start_cmd=recipe.startCmd, ready_cmd=recipe.readyCmd)


async def _within_quota(ctx: Context, what: str, made: Path | None) -> None:
    """Raises StorageFull when uploads and layers fill the build storage quota, after removing
    `made` (the layer that passed it: a failed step keeps none)."""
    if ctx.storage is None:
        return
    try:
        await asyncio.to_thread(ctx.storage.check, what)
    except StorageFull:
        if made is not None:
            await asyncio.to_thread(remove_tree, made)
        raise


def _nothing_to_make(step: Step, image: TemplateImage) -> bool:
    layers = image.layer_paths
    if step.type == "USER":
        return layer_view.ids_of(layers, step.args[0]) is not None
    if step.type == "WORKDIR":
        found = layer_view.resolve(layers, _absolute(step.args[0], image.workdir))
        return found is not None and stat.S_ISDIR(found[1].st_mode)
    return False


def _after(step: Step, image: TemplateImage) -> TemplateImage:
    if step.type == "WORKDIR":
        return dataclasses.replace(image, workdir=_absolute(step.args[0], image.workdir))
    if step.type == "USER":
        return dataclasses.replace(image, user=step.args[0])
    return image


def _absolute(path: str, workdir: str) -> str:
    return path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"


def _key(parent: str, step: Step, image: TemplateImage) -> str:
    """128 bits of hash: layer paths stay short (a mount's options are one page)."""
    data = {"parent": parent, "step": step.key(), "env": image.env, "user": image.user,
            "workdir": image.workdir}  # fmt: skip
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


async def _make_layer(
    step: Step, image: TemplateImage, ctx: Context, log: BuildLog, label: str, name: str
) -> None:
    if step.type == "COPY":
        await _copy(step, image, ctx, label, name)
        return
    user, command = "root", _command(step, image)
    if step.type == "RUN":
        user = step.args[1] if len(step.args) > 1 and step.args[1] else image.user
    async with ctx.sandboxes.booted(image, ctx.limits, ctx.disk_mb) as box:
        cwd = image.workdir if step.type == "RUN" else "/"
        code = await _run_logged(ctx, box, image.command(command, user, cwd), log, label)
        if code != 0:
            failed = _what_failed(step, int(label))
            raise StepFailed(label, f"{failed}: command failed: exit status {code}")
        await ctx.sandboxes.snapshot(box, ctx.layers, name)


async def _run_logged(ctx: Context, box: Box, command: Command, log: BuildLog, label: str) -> int:
    def output(stream: str, data: bytes) -> None:
        log.output(stream, data, label)

    try:
        return await ctx.sandboxes.run(box, command, output)
    finally:
        log.end_output(label)


def _what_failed(step: Step, number: int) -> str:
    """The start of a failed step's message: a RUN's as E2B's builder words it (SDK users match
    on it), the others' by their number and type."""
    if step.type == "RUN":
        return f"failed to run command '{step.args[0]}'"
    return f"step {number} ({step.type}) failed"


def _command(step: Step, image: TemplateImage) -> str:
    """What a RUN, WORKDIR or USER step runs in the build sandbox (the last two as root)."""
    if step.type == "RUN":
        return step.args[0]
    if step.type == "WORKDIR":
        path = shlex.quote(_absolute(step.args[0], image.workdir))
        owner = shlex.quote(image.user)
        return f"[ -d {path} ] || {{ mkdir -p {path} && chown {owner} {path}; }}"
    name = shlex.quote(step.args[0].partition(":")[0])  # USER of a user the image lacks
    return f"useradd -m -s /bin/bash {name} 2>/dev/null || adduser -D {name}"


async def _copy(step: Step, image: TemplateImage, ctx: Context, label: str, name: str) -> None:
    assert step.filesHash is not None  # noqa: S101  # the recipe checks COPY has one
    if not ctx.uploads.present(step.filesHash):
        raise StepFailed(label, f"step {label} (COPY): its files ({step.filesHash}) were never "
                         "uploaded")  # fmt: skip
    src, dest = step.args[0], step.args[1]
    owner = (step.args[2] if len(step.args) > 2 else "") or image.user
    ids = layer_view.ids_of(image.layer_paths, owner)
    if ids is None:
        raise StepFailed(label, f"step {label} (COPY): no user or group {owner!r} in the image")
    mode = parse_mode(step.args[3] if len(step.args) > 3 else "")
    context = ctx.uploads.path(step.filesHash)

    def fill(layer: Path) -> None:
        with ctx.layers.view(image.layer_paths) as below:
            copy_to_layer(context, src, dest, layer, uid=ids[0], gid=ids[1], mode=mode,
                          workdir=image.workdir, lower_view=below)  # fmt: skip

    try:
        await asyncio.to_thread(ctx.layers.add, name, fill)
    except (OSError, SandboxError) as exc:
        raise StepFailed(label, f"step {label} (COPY {src} {dest}): {exc}") from exc


async def finalize(image: TemplateImage, ctx: Context, log: BuildLog) -> None:
    """Boot the result and run its start command until its ready command succeeds, as every
    sandbox of it will: a template whose sandboxes would never be ready fails now (its start
    command's output in the log until then)."""
    if image.start_cmd is None and image.ready_cmd is None:
        return
    log.add("finalize: checking the start and ready commands", step="finalize")

    def output(stream: str, data: bytes) -> None:
        log.output(stream, data, "finalize")

    try:
        async with ctx.sandboxes.booted(image, ctx.limits, ctx.disk_mb) as box:
            await start_and_wait(ctx.sandboxes.envd, box.id, image.start_command,
                                 image.ready_command, on_output=output)  # fmt: skip
    except SandboxError as exc:
        raise StepFailed("finalize", f"finalize: {exc}") from exc
    finally:
        log.end_output("finalize")
