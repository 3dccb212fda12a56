"""Paths as records keep them, so that a record written by one daemon is read by another with
another state directory (a node agent of a cluster reading what another node wrote in the
shared database): a path inside the writer's state directory is kept relative to it and
resolved against the reader's own; one outside it (a `--base-rootfs` given elsewhere, rows
written before records were portable) stays absolute, as it is."""

from __future__ import annotations

from pathlib import Path


def recorded(path: Path | str, root: Path) -> str:
    """`path` as a record keeps it: relative to the state directory `root` when inside it."""
    path = Path(path)
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def resolved(kept: str, root: Path) -> Path:
    """The path a record's `kept` names on this machine, whose state directory is `root` (an
    absolute one stays as it is)."""
    return root / kept
