"""A template's start and ready commands, run in a sandbox of it: the start command in the
background (as the template's user, in its workdir, with its env), then the ready command until
it exits 0. The build's finalize phase checks them; every sandbox of the template runs them
before it is handed out (the warm pool holds sandboxes that are ready)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxd import envd_process

if TYPE_CHECKING:
    from sandboxd.builds.template_image import TemplateImage
    from sandboxd.envd_client import EnvdClient

READY_TIMEOUT_S = 120


async def start_and_wait(
    envd: EnvdClient, sandbox_id: str, image: TemplateImage, timeout_s: float = READY_TIMEOUT_S
) -> None:
    """Raises CommandError (the start command could not start; NotReady: the ready command
    did not succeed within `timeout_s`, its last output in the message) or EnvdUnreachable."""
    if image.start_cmd:
        await envd_process.start(envd, sandbox_id, image.command(image.start_cmd))
    if image.ready_cmd:
        ready = image.command(image.ready_cmd)
        await envd_process.wait_ready(envd, sandbox_id, ready, timeout_s=timeout_s)
