"""The forms of sandboxd's ids and times: sandbox, template and build ids, the one pattern a
sandbox id is checked against (API paths, proxy hosts and headers, the runtime's directories),
and the clock every record uses (microseconds since the epoch, written as RFC 3339)."""

from __future__ import annotations

import re
import secrets
import string
import time
from datetime import UTC, datetime

ALPHABET = string.ascii_lowercase + string.digits
# a-z and 0-9 only (a dash splits `{port}-{id}.{domain}` hosts and the legacy `id-clientid`
# path form), and at most a DNS label's 63 characters: hosts carry the id as one label.
SANDBOX_ID = re.compile(r"^[a-z0-9]{1,63}$")


def is_sandbox_id(text: str) -> bool:
    return SANDBOX_ID.match(text) is not None


def new_sandbox_id() -> str:
    """The reference's form: `i` and 20 of [a-z0-9]."""
    return "i" + "".join(secrets.choice(ALPHABET) for _ in range(20))


def new_template_id() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(20))


def new_build_id() -> str:
    """A random (version 4) UUID, as the reference's build ids."""
    hexed = secrets.token_hex(16)
    return f"{hexed[:8]}-{hexed[8:12]}-4{hexed[13:16]}-8{hexed[17:20]}-{hexed[20:]}"


def now_us() -> int:
    return time.time_ns() // 1000


def rfc3339(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
