"""The tokens sandboxd derives from its secret (made once per state directory): a sandbox's
envd access token and its traffic token are HMACs of its id, so they are the same across pause,
resume and restarts without being stored."""

from __future__ import annotations

import hashlib
import hmac


class Tokens:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def envd(self, sandbox_id: str) -> str:
        """hex HMAC-SHA256(secret, id): envd's X-Access-Token for a secure sandbox."""
        return hmac.new(self._secret, sandbox_id.encode(), hashlib.sha256).hexdigest()

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
