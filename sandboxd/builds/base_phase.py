"""A build's base: the image its steps start from. `fromTemplate` (and `fromImage:
e2bdev/base`) stacks on a template's image as it is; `fromImage` pulls the image from its
registry and adds two layers of ours over its own: the self-contained envd (one layer shared by
every template) and what the SDKs assume of a sandbox (the `user` account, sudo), so that an
image without systemd or Python boots with envd as its program; then, as E2B, systemd where the
image can take it (sandboxd.builds.systemd_init: a third layer, and systemd as its init)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.builds.envd_layer import envd_artifact, envd_layer
from sandboxd.builds.provision import provision
from sandboxd.builds.systemd_init import NoSystemd, Provision, with_systemd
from sandboxd.errors import TemplateError
from sandboxd.images import pull, reference
from sandboxd.images.known import KnownImages
from sandboxd.images.skopeo import Credentials
from sandboxd.templates.image import DEFAULT_USER, DEFAULT_WORKDIR, TemplateImage

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.builds.build_log import BuildLog
    from sandboxd.builds.build_run import Context
    from sandboxd.builds.recipe import Recipe
    from sandboxd.images.unpack import Quota
    from sandboxd.layers.store import LayerStore
    from sandboxd.templates.catalog import Templates

PROVISION_VERSION = "1"  # a change to what provision() writes makes new provision layers


@dataclass(frozen=True)
class Base:
    image: TemplateImage
    key: str  # what the base is, for the steps' cache keys


@dataclass(frozen=True)
class ImageSource:
    """Where pulled images come from and what makes a foreign image bootable."""

    layers: LayerStore
    quota: Quota | None  # what the layers a pull unpacks may take (None: no quota)
    envd_artifact: Path | None
    mirror: str | None = None
    provision: Provision = "auto"  # systemd as the init (sandboxd.builds.systemd_init)


async def base_of(recipe: Recipe, templates: Templates, source: ImageSource, ctx: Context,
                  log: BuildLog, team_id: str) -> Base:  # fmt: skip
    """The base of a build of the team's: `fromTemplate` one of its own or a public one.

    Raises:
        TemplateNotFound, TemplateError (ImageError, ImageNotFound included).
    """
    if recipe.fromTemplate is not None or recipe.from_base:
        ref = recipe.fromTemplate or "base"
        _, image = templates.resolve(ref, team_id)
        return Base(image, "template:" + _digest(image.to_json()))
    assert recipe.fromImage is not None  # noqa: S101  # the recipe has one of the two
    pulled = await asyncio.to_thread(_from_image, recipe, source)
    try:
        image, key = await with_systemd(pulled.image, pulled.key, source.provision, ctx, log)
    except NoSystemd as exc:
        raise TemplateError(f"provision systemd (serve --provision systemd): {exc}") from exc
    return Base(image, key)


def _from_image(recipe: Recipe, source: ImageSource) -> Base:
    artifact = envd_artifact(source.envd_artifact)
    ref = recipe.fromImage or ""
    creds = recipe.fromImageRegistry
    credentials = Credentials(creds.username or "", creds.password or "") if creds else None
    # Plain HTTP is decided on where the pull goes: a mirror on loopback serves Docker Hub's names.
    insecure = reference.parse(ref).via_mirror(source.mirror).on_loopback()
    known = KnownImages(source.layers.dir)
    account = credentials.username if credentials else None
    pulled = None if recipe.force else known.get(ref, account)
    if pulled is None:
        pulled = pull.pull(ref, source.layers, mirror=source.mirror, credentials=credentials,
                           insecure=insecure, quota=source.quota)  # fmt: skip
        known.put(ref, account, pulled)
    envd = envd_layer(source.layers, artifact)
    lowers = [*pulled.layers, envd]
    key = _digest({"image": pulled.digest, "envd": envd.name, "provision": PROVISION_VERSION})

    def provisioned_layer(new: Path) -> None:
        with source.layers.view(lowers) as view:
            provision(view, new)

    provisioned, _ = source.layers.add(f"prov-{key[:32]}", provisioned_layer)
    layers = (*lowers, provisioned)
    env = dict(e.split("=", 1) for e in pulled.config.env if "=" in e)
    image = TemplateImage(tuple(str(p) for p in layers), "envd", env, DEFAULT_USER,
                          DEFAULT_WORKDIR)  # fmt: skip
    return Base(image, "image:" + key)


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
