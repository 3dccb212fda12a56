"""envd's /init, as the orchestrator sends it after a boot and after a resume: the create's env
vars (over the template's), the access token, the default user and workdir (the template's),
and the host's time."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandboxd.errors import BootError, InitRefused
from sandboxd.guest.client import EnvdUnreachable
from sandboxd.ids import now_us, rfc3339

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandboxd.guest.client import EnvdClient

INIT_DEADLINE_S = 10
INIT_RETRY_S = 0.005


@dataclass(frozen=True)
class EnvdInit:
    """What /init tells envd: the sandbox's env vars, its access token (None: envd asks for
    none), and the user and workdir its commands run as and in by default."""

    env_vars: Mapping[str, str]
    user: str
    workdir: str
    token: str | None


async def init_envd(envd: EnvdClient, sandbox_id: str, init: EnvdInit) -> None:
    """POST /init until envd answers 204; a 4xx other than 429 will not change with retries and
    ends it at once. Sending it again (a resume) is idempotent and restores an envd that
    restarted.

    Raises:
        BootError: envd did not take it within INIT_DEADLINE_S.
        InitRefused: envd refused it (too large, or malformed).
    """
    deadline = time.monotonic() + INIT_DEADLINE_S
    last = "no answer"
    while time.monotonic() < deadline:
        body: dict[str, Any] = {
            "envVars": dict(init.env_vars),
            "defaultUser": init.user,
            "defaultWorkdir": init.workdir,
            "timestamp": rfc3339(now_us()),
        }
        if init.token is not None:
            body["accessToken"] = init.token
        try:
            status, answer = await envd.request(
                sandbox_id, "POST", "/init", body=body, token=init.token
            )
        except EnvdUnreachable as exc:
            last = str(exc)
        else:
            if status == 204:
                return
            last = f"{status} {answer[:200].decode(errors='replace')}"
            if 400 <= status < 500 and status != 429:
                raise InitRefused(
                    f"envd in sandbox {sandbox_id} refused /init: {last}", too_large=status == 413
                )
        await asyncio.sleep(INIT_RETRY_S)
    raise BootError(f"envd in sandbox {sandbox_id} did not take /init: {last}")
