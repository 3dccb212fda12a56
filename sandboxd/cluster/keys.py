"""The keys every gateway of a cluster derives from the cluster token, one per use, named by its
label: the same token gives every gateway the same key (what one signed, any other checks), and
one use's key tells nothing of another's. The labels are fixed: a changed one would invalidate
what was signed under it (a volume's token handed out, an upload URL)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

UPLOADS: Final = b"sandboxd build uploads"  # the build uploads' signed URLs
VOLUME_TOKENS: Final = b"sandboxd volume tokens"  # the volumes' content-API tokens


def derived_key(cluster_token: str, label: bytes) -> bytes:
    """HMAC-SHA256 of `label` under the cluster token."""
    return hmac.new(cluster_token.encode(), label, hashlib.sha256).digest()
