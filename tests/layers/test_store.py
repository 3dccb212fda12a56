"""The layer store: a layer is made once, whole or not at all, under its name (a digest's `:`
as `-`), by one maker when several ask at once; what a maker killed half-way left, and a view
left mounted, go at start-up; collection keeps what a template or a sandbox stacks and nothing
goes while a build runs."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from sandboxd.host.removal import mounts_under
from sandboxd.layers.collect import LayerUsers, collect
from sandboxd.layers.store import LayerStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def write(text: str) -> Callable[[Path], None]:
    def make(new: Path) -> None:
        (new / "file").write_text(text)

    return make


def test_a_layer_is_made_once_under_its_name(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    path, made = store.add("sha256:ab", write("first"))
    assert (path, made) == (tmp_path / "layers/sha256-ab", True)
    assert store.add("sha256:ab", write("second")) == (path, False)
    assert (path / "file").read_text() == "first"  # a layer never changes once made
    assert store.find("sha256:ab") == path
    assert store.find("sha256:cd") is None
    assert store.layers() == [path]
    assert os.stat(store.dir).st_mode & 0o777 == 0o700
    assert list((store.dir / ".locks").iterdir()) == []  # no lock file left per layer


def test_a_failed_make_leaves_no_layer(tmp_path: Path) -> None:
    store = LayerStore(tmp_path)

    def fail(new: Path) -> None:
        (new / "half").write_text("made")
        raise OSError("no room")

    with pytest.raises(OSError, match="no room"):
        store.add("step-x", fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks"]


def test_makers_of_one_layer_at_once_make_it_once(tmp_path: Path) -> None:
    store = LayerStore(tmp_path)
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow(new: Path) -> None:
        calls.append(new)
        started.set()
        release.wait(10)
        (new / "file").write_text("made")

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(store.add, "step-x", slow)
        started.wait(10)
        # Two more makers meanwhile: each takes the lock (a fresh file once the first maker's
        # is unlinked) and finds the layer made.
        others = [pool.submit(store.add, "step-x", slow) for _ in range(2)]
        release.set()
        results = [first.result(), *(f.result() for f in others)]
    assert sorted(results) == [(tmp_path / "step-x", False)] * 2 + [(tmp_path / "step-x", True)]
    assert len(calls) == 1
    assert list((tmp_path / ".locks").iterdir()) == []


@pytest.mark.root
def test_leftovers_go_at_start_up(tmp_path: Path) -> None:
    store = LayerStore(tmp_path)
    kept, _ = store.add("step-kept", write("kept"))
    (tmp_path / ".new-step-x").mkdir()  # a maker killed half-way
    store.pull_dir()
    view = store.view([kept])
    root = view.__enter__()  # a build killed with a view mounted
    assert (root / "file").read_text() == "kept"

    store.remove_leftovers()

    assert mounts_under(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "step-kept"]
    view.__exit__(None, None, None)  # the killed build's end: nothing left to undo


def test_collection_keeps_what_templates_and_sandboxes_stack(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    template, sandbox, unused = (store.add(n, write(n))[0] for n in ("a", "b", "c"))
    (tmp_path / "link").symlink_to(store.dir)  # a record may name a layer another way
    (store.dir / ".images").mkdir()  # the store's own: never collected

    running = LayerUsers(building=True, templates=[], sandboxes=[])
    assert collect(store, running) == []
    assert store.layers() == [template, sandbox, unused]

    users = LayerUsers(building=False, templates=[template], sandboxes=[tmp_path / "link/b"])
    assert collect(store, users) == ["c"]
    assert store.layers() == [template, sandbox]
    assert (store.dir / ".images").is_dir()
