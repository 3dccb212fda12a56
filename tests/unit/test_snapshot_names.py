"""Snapshot names by E2B's rules (infra: shared/pkg/id): `[namespace/]alias[:tag]`, each part
trimmed and lower-cased, the namespace the team's, and the reference's refusals."""

from __future__ import annotations

import pytest

from sandboxd.errors import NotAllowed
from sandboxd.store.rows import DEFAULT_TEAM_SLUG
from sandboxd.templates.snapshots import SnapshotName, parse_name


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("snap", SnapshotName("snap")),
        (" Snap_1-x ", SnapshotName("snap_1-x")),
        ("snap:V1.2", SnapshotName("snap", "v1.2")),
        ("snap:default", SnapshotName("snap", "default")),
        (" SandboxD / snap : v2 ", SnapshotName("snap", "v2")),
        ("-leading", SnapshotName("-leading")),
    ],
)
def test_names_are_trimmed_and_lower_cased(name: str, parsed: SnapshotName) -> None:
    assert parse_name(name, DEFAULT_TEAM_SLUG) == parsed


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Invalid name: alias '' must match ^[a-z0-9_-]+$"),
        ("a b", "Invalid name: alias 'a b' must match ^[a-z0-9_-]+$"),
        ("a.b", "Invalid name: alias 'a.b' must match ^[a-z0-9_-]+$"),
        ("sandboxd/a/b", "Invalid name: alias 'a/b' must match ^[a-z0-9_-]+$"),
        ("a:", "Invalid name: tag '' must match ^[a-z0-9_.-]+$"),
        ("a:b:c", "Invalid name: tag 'b:c' must match ^[a-z0-9_.-]+$"),
        ("/a", "Invalid name: namespace '' must match ^[a-z0-9_-]+$"),
        ("team/a", "namespace 'team' must match your team 'sandboxd'"),
    ],
)
def test_bad_names_are_refused_in_the_references_words(name: str, message: str) -> None:
    with pytest.raises(NotAllowed) as refused:
        parse_name(name, DEFAULT_TEAM_SLUG)
    assert str(refused.value) == message
