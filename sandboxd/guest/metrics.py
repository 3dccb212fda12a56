"""envd's /metrics: the sandbox's CPU, memory and disk use as envd measures them inside."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sandboxd.guest.client import EnvdUnreachable

if TYPE_CHECKING:
    from sandboxd.guest.client import EnvdClient


async def metrics(
    envd: EnvdClient, sandbox_id: str, *, token: str | None, timeout_s: float
) -> dict[str, Any]:
    """envd's /metrics answer (`ts`, `cpu_count`, `cpu_used_pct`, `mem_used`, `mem_total`,
    `mem_cache`, `disk_used`, `disk_total`), as envd sent it.

    Raises:
        EnvdUnreachable: no answer within `timeout_s`, or an answer other than 200.
        ValueError: the answer is not JSON.
    """
    status, body = await envd.request(
        sandbox_id, "GET", "/metrics", token=token, timeout_s=timeout_s
    )
    if status != 200:
        raise EnvdUnreachable(f"/metrics answered {status}")
    answer: dict[str, Any] = json.loads(body)
    return answer
