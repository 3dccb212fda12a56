"""The catalog's view of a sandbox (sandboxd.store.rows CatalogRow): what a create records of
it, and what is shown of it once its node is gone. E2B's API has no state for a sandbox that
cannot be reached (its SDKs parse `state` as running or paused only), so a lost sandbox is
listed in the state it was created in, not `running` as the API counts it (X-Total-Running
leaves it out), with its metadata holding LOST_KEY: the message saying why, and, for one paused
to disk whose record the catalog keeps (sandboxd.cluster.moves), that a resume moves it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from sandboxd.node.models import SandboxInfo

if TYPE_CHECKING:
    from sandboxd.store.rows import CatalogRow, NodeRow

LOST_KEY: Final = "sandboxd.lost"


def lost_message(node_id: str, node: NodeRow | None) -> str:
    if node is None:
        return f"its node {node_id} is no longer registered: the sandbox cannot be reached"
    expired = (node.heartbeat_us + node.lease_s * 1_000_000) / 1e6
    at = datetime.fromtimestamp(expired, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"its node {node_id} stopped answering (lease expired at {at}): "
            f"the sandbox cannot be reached until the node returns")  # fmt: skip


def unanswered_message(node_id: str, exc: BaseException) -> str:
    return f"its node {node_id} does not answer ({exc}): the sandbox cannot be reached"


def lost(entry: CatalogRow, message: str) -> SandboxInfo:
    """The sandbox of `entry` as listed while its node is gone."""
    info = SandboxInfo(**entry.info)
    if entry.record is not None:
        why = message.partition(": the sandbox cannot be reached")[0]
        message = (f"{why}: paused to disk, once the node's lease expired a resume or connect "
                   f"boots it on another node")  # fmt: skip
    return dataclasses.replace(info, running=False, metadata={**info.metadata, LOST_KEY: message})
