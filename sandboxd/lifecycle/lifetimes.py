"""How long a sandbox lives: the checks of a requested timeout and the ends a connect and
`POST /sandboxes/{id}/timeout` set, all within the maximum length counted from its last start
(serve's `--max-timeout`), in the reference's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.errors import NotAllowed

# A woken sandbox's shortest run (E2B infra's api/internal/handlers/auto_resume_timeout.go: the
# floor keeps a short-lived sandbox from pausing again as soon as it woke).
MIN_WOKEN_S = 60

if TYPE_CHECKING:
    from sandboxd.store.rows import SandboxRow


@dataclass(frozen=True)
class Lifetimes:
    max_timeout_s: int

    def check(self, timeout_s: int, *, positive: bool = True) -> None:
        """Raises NotAllowed for a timeout of 0 (when it must be `positive`) or past the
        maximum length."""
        if positive and timeout_s <= 0:
            raise NotAllowed("Timeout must be greater than 0")
        if timeout_s > self.max_timeout_s:
            raise NotAllowed(f"Timeout cannot be greater than {self.max_timeout_s / 3600:g} hours")

    def extend(self, row: SandboxRow, timeout_s: int, now: int) -> None:
        """A connect's end for a running sandbox: `timeout_s` from `now` if that is later (never
        shorter), within its maximum length."""
        cap = row.started_at + self.max_timeout_s * 1_000_000
        row.end_at = max(row.end_at, min(now + timeout_s * 1_000_000, cap))

    def set(self, row: SandboxRow, timeout_s: int, now: int) -> None:
        """A set timeout's end: `timeout_s` from `now`, clamped to the maximum length.

        Raises:
            NotAllowed: the maximum length is used up.
        """
        left = row.started_at + self.max_timeout_s * 1_000_000 - now
        if left <= 0:
            raise NotAllowed(f"Sandbox {row.sandbox_id} reached its maximum length")
        row.end_at = now + min(timeout_s * 1_000_000, left)

    def woken(self, timeout_s: int) -> int:
        """How long a sandbox created with `timeout_s` runs when traffic wakes it: that timeout,
        clamped to [a minute, the maximum length]."""
        return min(max(timeout_s, MIN_WOKEN_S), self.max_timeout_s)
