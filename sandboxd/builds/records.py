"""A build's record written with its template's: whoever ends a build (its builder, or a
cluster's reconciliation for a build whose node was lost) writes both alike."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from sandboxd.ids import now_us

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandboxd.store.interface import Store
    from sandboxd.store.rows import BuildRow


def mark_failed(build: BuildRow, message: str, step: str | None) -> None:
    """`build` ended in error now, for `message` (at `step`, if one)."""
    now = now_us()
    build.status, build.updated_at, build.finished_at = "error", now, now
    build.reason = {"message": message} | ({"step": step} if step else {})


async def record(store: Store, build: BuildRow, *changes: Callable[[], None]) -> None:
    """The build as it is now, `changes` with it, and the template's status when this is its
    latest build (the template shows that one's), in one transaction; nothing when the template
    was deleted meanwhile.

    Raises:
        StoreUnavailable: the database is away.
    """
    template = store.template(build.template_id)
    if template is None:
        return
    writes: list[Callable[[], None]] = [functools.partial(store.put_build, build), *changes]
    if template.build_id == build.build_id:
        template.build_status, template.updated_at = build.status, now_us()
        writes.append(functools.partial(store.put_template, template))
    await store.write(*writes)
