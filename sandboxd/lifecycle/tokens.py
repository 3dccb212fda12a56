"""The tokens sandboxd derives from its secret (made once per state directory): a sandbox's
envd access token and its traffic token are HMACs of its id, so they are the same across pause,
resume and restarts without being stored. A sandbox moved from another machine (sandboxd.
lifecycle.moves) keeps the tokens that machine gave it, in its record's options under KEPT_KEY
(never shown, never inherited by a fork): the SDK that created it holds them."""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from sandboxd.store.rows import SandboxRow

KEPT_KEY: Final = "sandboxd.tokens"


def kept(row: SandboxRow) -> tuple[str | None, str] | None:
    """The envd token (None when not secure) and traffic token the sandbox of `row` moved with,
    None when it never moved."""
    tokens = row.options.get(KEPT_KEY)
    if not isinstance(tokens, dict):
        return None
    return (tokens.get("envd") if row.secure else None), str(tokens["traffic"])


def keeping(options: dict[str, Any], envd: str | None, traffic: str) -> dict[str, Any]:
    """`options` with the tokens a sandbox moves with."""
    return {**options, KEPT_KEY: {"envd": envd, "traffic": traffic}}


def without_kept(options: dict[str, Any]) -> dict[str, Any]:
    """`options` as shown, or as a fork inherits them: without the tokens kept."""
    return {k: v for k, v in options.items() if k != KEPT_KEY}


class Tokens:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def envd(self, sandbox_id: str) -> str:
        """hex HMAC-SHA256(secret, id): envd's X-Access-Token for a secure sandbox."""
        return hmac.new(self._secret, sandbox_id.encode(), hashlib.sha256).hexdigest()

    def of(self, row: SandboxRow) -> tuple[str | None, str]:
        """The envd token (None when not secure) and traffic token of the sandbox of `row`:
        those it moved with, else this machine's."""
        moved = kept(row)
        if moved is not None:
            return moved
        return (self.envd(row.sandbox_id) if row.secure else None), self.traffic(row.sandbox_id)

    def traffic(self, sandbox_id: str) -> str:
        """The `e2b-traffic-access-token` of a sandbox without public traffic."""
        message = f"sandbox-traffic-{sandbox_id}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def uploads_key(self) -> bytes:
        """The key template upload URLs are signed with (sandboxd.builds.upload_urls)."""
        return hmac.new(self._secret, b"template-uploads", hashlib.sha256).digest()

    def volumes_key(self) -> bytes:
        """The key volume-content tokens are signed with (sandboxd.volumes.tokens)."""
        return hmac.new(self._secret, b"volume-content", hashlib.sha256).digest()
