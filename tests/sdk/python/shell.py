"""A root shell where the sandbox's files are, to check what the files API did (and to change
files behind its back) by another way than the files API itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from e2b import Sandbox


def sh(sandbox: Sandbox, command: str) -> str:
    """`command`'s stdout, run by bash as root; a non-zero exit raises."""
    out: str = sandbox.commands.run(command, user="root").stdout
    return out
