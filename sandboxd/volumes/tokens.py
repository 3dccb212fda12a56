"""The bearer tokens of the volume-content API: each opens one volume until it expires.
`<volume id>.<expiry, Unix seconds>.<hex HMAC-SHA256 of both>`, keyed by a key derived from
the state directory's secret, so they need no storage and hold across restarts. A token names
its volume's UUID: one for a deleted volume opens nothing, even under a volume of the same
name made later."""

from __future__ import annotations

import hashlib
import hmac
import time

# A week: the SDKs never refresh a volume's token, and `Volume.connect` (GET /volumes/{id})
# hands out a new one whenever asked.
TOKEN_LIFETIME_S = 7 * 24 * 3600


class VolumeTokens:
    def __init__(self, key: bytes, lifetime_s: int = TOKEN_LIFETIME_S) -> None:
        self._key = key
        self._lifetime_s = lifetime_s

    def mint(self, volume_id: str) -> str:
        """A token for `volume_id`, valid for the lifetime from now."""
        expires = int(time.time()) + self._lifetime_s
        return f"{volume_id}.{expires}.{self._sign(volume_id, expires)}"

    def opens(self, token: str, volume_id: str) -> bool:
        """Whether `token` was minted here for `volume_id` and has not expired."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != volume_id or not parts[1].isdigit():
            return False
        expires = int(parts[1])
        if expires < time.time():
            return False
        return hmac.compare_digest(parts[2], self._sign(volume_id, expires))

    def _sign(self, volume_id: str, expires: int) -> str:
        return hmac.new(self._key, f"{volume_id}.{expires}".encode(), hashlib.sha256).hexdigest()
