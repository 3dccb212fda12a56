"""The tokens a sandbox moves with (sandboxd.lifecycle.tokens): a moved sandbox is served with
the tokens its first machine gave it, whatever this machine's secret; its options as shown and
as a fork inherits them leave them out."""

from __future__ import annotations

import dataclasses

from sandboxd.lifecycle.tokens import KEPT_KEY, Tokens, keeping, without_kept
from sandboxd.store.rows import SandboxRow

NETWORK = {"network": {"allowPublicTraffic": False}}


def row(secure: bool = True, **options: object) -> SandboxRow:
    return SandboxRow("s1", "base", None, "paused", 1, 2, 300, secure, True, 2, 512, 0, "0.1",
                      options=dict(options))  # fmt: skip


def test_a_sandbox_that_never_moved_has_this_machine_s_tokens() -> None:
    here = Tokens(b"here")
    assert here.of(row()) == (here.envd("s1"), here.traffic("s1"))
    assert here.of(row(secure=False)) == (None, here.traffic("s1"))


def test_a_moved_sandbox_keeps_its_first_machine_s_tokens() -> None:
    first, here = Tokens(b"first"), Tokens(b"here")
    moved = row(network=NETWORK["network"])
    moved.options = keeping(moved.options, *first.of(moved))
    assert here.of(moved) == (first.envd("s1"), first.traffic("s1"))
    assert here.of(moved) != (here.envd("s1"), here.traffic("s1"))
    again = dataclasses.replace(moved, options=keeping(moved.options, *here.of(moved)))
    assert Tokens(b"third").of(again) == first.of(row())  # moved twice: still the first's


def test_shown_and_inherited_options_leave_the_tokens_out() -> None:
    kept = keeping(dict(NETWORK), "e" * 64, "t" * 64)
    assert KEPT_KEY in kept
    assert without_kept(kept) == NETWORK
