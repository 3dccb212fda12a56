"""COPY steps as layers (sandboxd.builds.copy_layer), looked at the way a sandbox sees them: the
image's layers and the new one stacked in a real overlay. E2B's rules (copy_script.sh) for
files, directories, a trailing `/`, globs, owners and modes; the image's directories keep their
owners and modes; links are copied as links; what cannot be done leaves no layer."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from sandboxd.builds.copy_layer import copy_to_layer, parse_mode, source_base
from sandboxd.errors import CopyFailed
from sandboxd.layers.store import LayerStore
from tests.builds.overlays import deep_trees, make_deep, read_deep, view

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager
    from pathlib import Path

pytestmark = pytest.mark.root


def owner(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def make_dir(path: Path, uid: int = 0, gid: int = 0, mode: int = 0o755) -> None:
    path.mkdir(parents=True)
    os.chown(path, uid, gid)
    path.chmod(mode)


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """An image's layer as template layers store them: /home/user 1000:1000 0750, /opt/app with
        a file and a private directory, /lib a symlink to usr/lib, /etc/passwd a file,
    /etc/resolv.conf a symlink to a file (as on Ubuntu)."""
    base = tmp_path / "base"
    make_dir(base)
    make_dir(base / "home", mode=0o755)
    make_dir(base / "home/user", 1000, 1000, 0o750)
    make_dir(base / "opt/app", 7, 7, 0o711)
    (base / "opt/app/old.txt").write_text("old")
    (base / "opt/app/main.py").write_text("old main")
    make_dir(base / "opt/app/conf", 7, 7, 0o700)
    make_dir(base / "usr/lib")
    (base / "lib").symlink_to("usr/lib")
    make_dir(base / "etc")
    (base / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (base / "etc/resolv.conf").symlink_to("../run/resolv.conf")
    make_dir(base / "run")
    (base / "run/resolv.conf").write_text("the image's")
    os.setxattr(base / "home/user", "user.note", b"kept")
    os.utime(base / "home/user", (1_600_000_000, 1_600_000_000))
    return base


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """An uploaded build context (owned by root, as uploads are)."""
    ctx = tmp_path / "ctx"
    (ctx / "app/static").mkdir(parents=True)
    (ctx / "app/main.py").write_text("print('new')\n")
    (ctx / "app/main.py").chmod(0o644)
    (ctx / "app/static/index.html").write_text("<html>")
    (ctx / "app/link").symlink_to("/etc/passwd")
    os.link(ctx / "app/main.py", ctx / "app/alias.py")
    (ctx / "app/conf").mkdir()
    (ctx / "app/conf/app.ini").write_text("[x]")
    (ctx / "notes.txt").write_text("notes")
    return ctx


@pytest.fixture
def lower(image: Path, tmp_path: Path) -> Iterator[Path]:
    with view([image], tmp_path / "lower") as mounted:
        yield mounted


def copy(context: Path, layer: Path, src: str, dest: str, lower: Path | None = None,
         **kw: object) -> Path:  # fmt: skip
    """The COPY as the layer `layer`, made as a build makes it: in a layer store."""
    args: dict[str, object] = {"uid": 1000, "gid": 1000, "mode": None, **kw}

    def fill(new: Path) -> None:
        copy_to_layer(context, src, dest, new, lower_view=lower, **args)  # type: ignore[arg-type]

    return LayerStore(layer.parent).add(layer.name, fill)[0]


def merged(image: Path, layer: Path, tmp_path: Path) -> AbstractContextManager[Path]:
    return view([image, layer], tmp_path / "merged")


def test_a_file_into_a_directory_keeps_the_images_directories(
    context: Path, image: Path, lower: Path, tmp_path: Path
) -> None:
    layer = copy(context, tmp_path / "layer", "app/main.py", "/home/user/app/", lower)

    with merged(image, layer, tmp_path) as root:
        assert (root / "home/user/app/main.py").read_text() == "print('new')\n"
        assert owner(root / "home/user/app/main.py") == (1000, 1000, 0o644)
        assert owner(root / "home/user/app") == (0, 0, 0o755)  # E2B: mkdir -p, as root
        assert owner(root / "home/user") == (1000, 1000, 0o750)
        assert os.getxattr(root / "home/user", "user.note") == b"kept"
        assert (root / "home/user").stat().st_mtime == 1_600_000_000
        assert owner(root / "home") == (0, 0, 0o755)
        assert owner(root) == owner(image)
        assert sorted(os.listdir(root)) == ["etc", "home", "lib", "opt", "run", "usr"]


def test_a_file_to_a_new_name_or_into_an_existing_directory(
    context: Path, image: Path, lower: Path, tmp_path: Path
) -> None:
    renamed = copy(context, tmp_path / "renamed", "app/main.py", "/srv/run.py", lower)
    into = copy(context, tmp_path / "layer", "notes.txt", "/home/user", lower)

    assert (renamed / "srv/run.py").read_text() == "print('new')\n"
    assert owner(renamed / "srv") == (0, 0, 0o755)
    with merged(image, into, tmp_path) as root:
        assert (root / "home/user/notes.txt").read_text() == "notes"  # mv into the directory
        assert owner(root / "home/user") == (1000, 1000, 0o750)


def test_a_directorys_contents_merge_into_the_images(
    context: Path, image: Path, lower: Path, tmp_path: Path
) -> None:
    layer = copy(context, tmp_path / "layer", "app/", "/opt/app", lower, mode=parse_mode("0755"))

    with merged(image, layer, tmp_path) as root:
        app = root / "opt/app"
        assert sorted(os.listdir(app)) == [
            "alias.py", "conf", "link", "main.py", "old.txt", "static",
        ]  # fmt: skip
        assert (app / "old.txt").read_text() == "old"  # the image's, untouched
        assert (app / "main.py").read_text() == "print('new')\n"  # replaced
        assert owner(app / "main.py") == (1000, 1000, 0o755)
        assert owner(app) == (7, 7, 0o711)  # --no-overwrite-dir: the image's directories
        assert owner(app / "conf") == (7, 7, 0o700)
        assert (app / "conf/app.ini").read_text() == "[x]"
        assert owner(app / "static") == (1000, 1000, 0o755)  # new: the COPY's owner and mode
        assert owner(app / "static/index.html") == (1000, 1000, 0o755)


def test_links_are_copied_as_links(context: Path, tmp_path: Path) -> None:
    layer = copy(context, tmp_path / "layer", "app", "/srv/app")

    link = layer / "srv/app/link"
    assert link.is_symlink()
    assert os.readlink(link) == "/etc/passwd"
    assert link.lstat().st_uid == 1000
    assert (layer / "srv/app/alias.py").stat().st_ino == (layer / "srv/app/main.py").stat().st_ino
    assert (layer / "srv/app/main.py").stat().st_nlink == 2


def test_a_symlinked_directory_of_the_image_is_followed(
    context: Path, image: Path, lower: Path, tmp_path: Path
) -> None:
    layer = copy(context, tmp_path / "layer", "notes.txt", "/lib/notes/", lower)

    assert not (layer / "lib").exists()
    assert (layer / "usr/lib/notes/notes.txt").read_text() == "notes"
    with merged(image, layer, tmp_path) as root:
        assert (root / "lib").is_symlink()
        assert (root / "lib/notes/notes.txt").read_text() == "notes"


def test_a_directory_merges_through_the_images_symlinks_and_replaces_file_links(
    image: Path, lower: Path, tmp_path: Path
) -> None:
    """E2B copy_test.go follow_target_symlink_to_directory (usrmerge) and
    replace_target_symlink_to_file: `COPY . /`."""
    ctx = tmp_path / "ctx"
    (ctx / "lib").mkdir(parents=True)
    (ctx / "lib/mylib.so").write_text("lib")
    (ctx / "etc").mkdir()
    (ctx / "etc/resolv.conf").write_text("nameserver 192.0.2.53\n")

    layer = copy(ctx, tmp_path / "layer", ".", "/", lower)

    assert sorted(os.listdir(layer)) == ["etc", "usr"]
    with merged(image, layer, tmp_path) as root:
        assert (root / "lib").is_symlink()
        assert sorted(os.listdir(root / "lib")) == ["mylib.so"]
        assert not (root / "etc/resolv.conf").is_symlink()
        assert (root / "etc/resolv.conf").read_text() == "nameserver 192.0.2.53\n"
        assert (root / "run/resolv.conf").read_text() == "the image's"  # not written through


@pytest.mark.parametrize(
    ("uploaded", "src", "dest", "expected"),
    [
        (["app/main.py", "app/alias.py"], "app/*.py", "/dest/", {"dest/main.py", "dest/alias.py"}),
        (["notes.txt"], "*.txt", "/dest/", {"dest/notes.txt"}),
        (["app/static/index.html"], "app/**/*.html", "out/", {"home/user/out/static/index.html"}),
    ],
)
def test_globs_take_what_the_client_uploaded(
    tmp_path: Path, uploaded: list[str], src: str, dest: str, expected: set[str]
) -> None:
    """The SDKs upload only what matches; the layer takes the upload from the glob's base."""
    ctx = tmp_path / "ctx"
    for name in uploaded:
        (ctx / name).parent.mkdir(parents=True, exist_ok=True)
        (ctx / name).write_text(name)

    layer = copy(ctx, tmp_path / "layer", src, dest, workdir="/home/user")

    found = {str(p.relative_to(layer)) for p in layer.rglob("*") if p.is_file()}
    assert found == expected


def test_the_copy_owner_and_set_id_bits(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "tool").write_text("#!/bin/sh\n")
    (ctx / "tool").chmod(0o4755)

    kept = copy(ctx, tmp_path / "kept", "tool", "/bin/", uid=5, gid=6)
    asked = copy(ctx, tmp_path / "asked", "tool", "/bin/", uid=5, gid=6, mode=parse_mode("4750"))

    assert owner(kept / "bin/tool") == (5, 6, 0o755)  # chown drops set-uid, as E2B's does
    assert owner(asked / "bin/tool") == (5, 6, 0o4750)  # unless the mode asks for it


def test_without_a_view_the_image_is_taken_as_empty(context: Path, tmp_path: Path) -> None:
    layer = copy(context, tmp_path / "layer", "app/main.py", "bin/", workdir="/home/user")

    assert owner(layer) == (0, 0, 0o755)
    assert owner(layer / "home/user") == (0, 0, 0o755)
    assert (layer / "home/user/bin/main.py").is_file()


@pytest.mark.parametrize(
    ("src", "dest", "message"),
    [
        ("missing.txt", "/x", "source path does not exist: missing.txt"),
        ("nothere/*.py", "/x/", "source path does not exist"),
        ("../outside", "/x", "leaves the build context"),
        ("notes.txt", "/etc/passwd/x", r"/etc/passwd is not a directory"),
        ("app/", "/etc/passwd", r"/etc/passwd is not a directory"),
        ("notes.txt", "/opt/app/conf", None),  # fine: into the directory
        ("app/link/x", "/x", r"not a directory \(a symlink\?\)"),
    ],
)
def test_what_cannot_be_copied_leaves_no_layer(
    context: Path, lower: Path, tmp_path: Path, src: str, dest: str, message: str | None
) -> None:
    layer = tmp_path / "layer"
    if message is None:
        copy(context, layer, src, dest, lower)
        assert (layer / "opt/app/conf/notes.txt").is_file()
        return
    with pytest.raises(CopyFailed, match=message):
        copy(context, layer, src, dest, lower)
    assert [p.name for p in tmp_path.iterdir() if "layer" in p.name] == []


def test_a_file_cannot_replace_a_directory_of_the_image(
    context: Path, lower: Path, tmp_path: Path
) -> None:
    (context / "opt/app").mkdir(parents=True)
    (context / "opt/app/conf").write_text("a file")

    with pytest.raises(CopyFailed, match="/opt/app/conf is a directory in the image"):
        copy(context, tmp_path / "layer", "opt/", "/opt", lower)


@pytest.mark.parametrize(
    ("src", "base"),
    [
        ("app/", ("app",)), ("app", ("app",)), ("app/*.py", ("app",)), ("*.txt", ()),
        (".", ()), ("./", ()), ("a/b/**/*.{ts,tsx}", ("a", "b")), ("/app/src", ("app", "src")),
        ("a/../b", ("b",)), ("file?.txt", ()),
    ],
)  # fmt: skip
def test_the_source_is_the_globs_base(src: str, base: tuple[str, ...]) -> None:
    """E2B copy_test.go TestParseCopyArgs: SplitPattern(src + "/")."""
    assert source_base(src) == base


@pytest.mark.parametrize("text", ["755x", "8", "u+x", "07555"])
def test_a_mode_that_is_not_octal_is_refused(text: str) -> None:
    with pytest.raises(CopyFailed, match="not an octal mode"):
        parse_mode(text)
    assert parse_mode("") is None
    assert parse_mode("0000") == 0


def test_a_deep_tree_is_copied(tmp_path: Path) -> None:
    ctx, layer = tmp_path / "ctx", tmp_path / "layer"
    ctx.mkdir()
    with deep_trees(ctx, layer):
        make_deep(ctx)

        copy(ctx, layer, ".", "/deep/")

        assert read_deep(layer / "deep") == b"deep"
