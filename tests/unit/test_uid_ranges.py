"""uid range claims (sandboxd.host.uid_ranges) in a claims directory of the test's own: the
record is written under the claims' lock, so a concurrent claim never finds a range whose
record is not written yet and takes it over as stale (two sandboxes had shared a range, and
their network slot with it, when creates ran at once)."""

from __future__ import annotations

import fcntl
from typing import TYPE_CHECKING

import pytest

from sandboxd.host import uid_ranges
from sandboxd.host.uid_ranges import FIRST_BASE, RANGE_SIZE

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(uid_ranges, "CLAIMS_DIR", tmp_path / "claims")
    return tmp_path / "claims"


def holds(record: Path, base: int) -> bool:
    return record.is_file() and int(record.read_text()) == base


def write(record: Path) -> Callable[[int], int]:
    def commit(base: int) -> int:
        record.write_text(str(base))
        return base

    return commit


def test_the_record_is_written_under_the_lock(claims: Path, tmp_path: Path) -> None:
    def commit(base: int) -> int:
        with open(claims / ".lock", "w") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (tmp_path / "a").write_text(str(base))
        return base

    assert uid_ranges.claim(tmp_path / "a", holds, commit) == FIRST_BASE
    assert uid_ranges.claim(tmp_path / "b", holds, write(tmp_path / "b")) == FIRST_BASE + RANGE_SIZE


def test_a_failed_commit_claims_nothing(claims: Path, tmp_path: Path) -> None:
    def commit(base: int) -> int:
        raise OSError(f"disk full writing the record of {base}")

    with pytest.raises(OSError, match="disk full"):
        uid_ranges.claim(tmp_path / "a", holds, commit)
    assert uid_ranges.claimed_by(tmp_path / "a") == []
    assert uid_ranges.claim(tmp_path / "b", holds, write(tmp_path / "b")) == FIRST_BASE


def test_a_claim_whose_record_is_gone_is_taken_over(claims: Path, tmp_path: Path) -> None:
    uid_ranges.claim(tmp_path / "a", holds, write(tmp_path / "a"))
    (tmp_path / "a").unlink()  # a sandboxd killed before the record, or a teardown half-way
    assert uid_ranges.claim(tmp_path / "b", holds, write(tmp_path / "b")) == FIRST_BASE
    assert uid_ranges.claimed_by(tmp_path / "b") == [FIRST_BASE]
