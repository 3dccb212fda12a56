"""SandboxState: what /init changes at run time (env vars, access token, default user/workdir)."""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envd.settings import Settings


@dataclass(slots=True)
class SandboxState:
    """Mutable runtime state shared by every route and RPC of one daemon."""

    # Set by envd itself; /init can neither override nor remove them.
    internal_env: dict[str, str] = field(default_factory=dict)
    # Replaced wholesale by /init envVars.
    user_env: dict[str, str] = field(default_factory=dict)
    access_token: str | None = None
    default_user: str = "root"
    default_workdir: str | None = None
    # Newest /init timestamp applied (Unix ns): older requests are replays and change nothing.
    last_init_timestamp_ns: int | None = None
    # /init is single-flight, as in the reference envd.
    init_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def for_settings(cls, settings: Settings) -> SandboxState:
        return cls(internal_env={"E2B_SANDBOX": "false" if settings.isnotfc else "true"})

    def env(self) -> dict[str, str]:
        """Every env-store variable; internal ones win over user ones."""
        return {**self.user_env, **self.internal_env}

    def replace_user_env(self, env: dict[str, str]) -> None:
        self.user_env = {k: v for k, v in env.items() if k not in self.internal_env}

    def token_matches(self, candidate: str | bytes | None) -> bool:
        """Constant-time comparison against the current access token.

        Pass raw header bytes where there are some: the reference compares bytes, and a str
        decoded from latin-1 header bytes would not equal a non-ASCII token.
        """
        if self.access_token is None or candidate is None:
            return False
        if isinstance(candidate, str):
            candidate = candidate.encode()
        return hmac.compare_digest(candidate, self.access_token.encode())
