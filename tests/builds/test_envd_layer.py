"""The envd layer: the artifact laid out as install.sh --artifact --root does, owned by root,
made once per artifact and shared; and what a build without an artifact is told."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import pytest

from sandboxd.builds.envd_layer import envd_artifact, envd_layer
from sandboxd.errors import TemplateError
from sandboxd.layers.store import LayerStore
from sandboxd.runtime.nspawn.container import ENVD_LAUNCHER

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root


def test_the_layer_holds_the_artifact_as_install_sh_lays_it_out(envd_layer_dir: Path) -> None:
    assert (envd_layer_dir / ENVD_LAUNCHER.lstrip("/")).is_file()
    assert os.readlink(envd_layer_dir / "usr/bin/envd") == ENVD_LAUNCHER
    # Nothing but /usr: a /lib directory would hide a merged-/usr image's /lib link.
    assert [p.name for p in envd_layer_dir.iterdir()] == ["usr"]
    owners = set()
    for path in [envd_layer_dir, *envd_layer_dir.rglob("*")]:
        st = os.lstat(path)
        owners.add((st.st_uid, st.st_gid))
    assert owners == {(0, 0)}
    assert envd_layer_dir.stat().st_mode & 0o777 == 0o755


def test_one_layer_per_artifact(
    layer_store: LayerStore, envd_layer_dir: Path, envd_artifact: Path, tmp_path: Path
) -> None:
    again = envd_layer(layer_store, envd_artifact)
    assert again == envd_layer_dir
    assert again.stat().st_ino == envd_layer_dir.stat().st_ino  # not made a second time
    copy = tmp_path / "renamed.tar.gz"
    shutil.copyfile(envd_artifact, copy)
    assert envd_layer(layer_store, copy) == envd_layer_dir  # the same bytes, by their sha256
    assert layer_store.layers() == [envd_layer_dir]


def test_a_build_without_an_artifact_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="start sandboxd serve with --envd-artifact TARBALL"):
        envd_artifact(None)
    assert envd_artifact(tmp_path / "a.tar.gz") == tmp_path / "a.tar.gz"
    with pytest.raises(TemplateError, match=r"the envd artifact .*missing\.tar\.gz"):
        envd_layer(LayerStore(tmp_path / "layers"), tmp_path / "missing.tar.gz")
    not_one = tmp_path / "not-an-artifact.tar.gz"
    not_one.write_bytes(b"not a tarball")
    with pytest.raises(TemplateError, match="installing the envd artifact"):
        envd_layer(LayerStore(tmp_path / "layers"), not_one)
    assert LayerStore(tmp_path / "layers").layers() == []
