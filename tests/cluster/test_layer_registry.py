"""Layers of the layer store pushed to a real registry (docker-registry on loopback) and pulled
into another store: the tree comes back as the store keeps it (files, modes, owners, links kept
as links, hard links, whiteouts, opaque directories, extended attributes, FIFOs); what the
registry has is not uploaded again; a registry that is down or refuses is a clear error and
leaves nothing in the store."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import ImageError, NotAllowed, RegistryError
from sandboxd.images.layer_registry import LayerRegistry
from sandboxd.images.skopeo import Credentials
from sandboxd.layers.entries import OPAQUE_XATTR
from sandboxd.layers.store import LayerStore
from tests.cluster.registry_server import registry_server, registry_url
from tests.images.registry import ACCOUNT
from tests.sandboxd.serving import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.images.registry import Registry

pytestmark = pytest.mark.root

CAPABILITY = bytes.fromhex("0100000200200000000000000000000000000000")  # v2: cap_net_raw


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with registry_server() as running:
        yield running


@pytest.fixture
def connect() -> Iterator[Callable[..., LayerRegistry]]:
    """connect(url, credentials=None) -> a LayerRegistry closed at the test's end."""
    made: list[LayerRegistry] = []

    def connect(url: str, credentials: Credentials | None = None) -> LayerRegistry:
        made.append(LayerRegistry(url, credentials))
        return made[-1]

    yield connect
    for remote in made:
        remote.close()


def make_layer(store: LayerStore, name: str) -> Path:
    """A layer as a sandbox's export leaves one, with every kind of entry the store keeps."""

    def fill(new: Path) -> None:
        (new / "etc").mkdir(mode=0o755)
        (new / "etc/hostname").write_text("box\n")
        (new / os.fsdecode(b"etc/not-utf8-\xff\nname")).write_text("odd")  # bytes, as written
        (new / "bin").mkdir()
        tool = new / "bin/tool"
        tool.write_bytes(os.urandom(3 << 20))  # past one read chunk
        tool.chmod(0o4755)
        os.setxattr(tool, "security.capability", CAPABILITY)
        os.setxattr(tool, "user.note", b"\xff binary \x00 value")
        os.link(tool, new / "bin/tool-again")
        (new / "home/user").mkdir(parents=True, mode=0o750)
        os.chown(new / "home/user", 1000, 1000)
        (new / "home/user/notes").write_text("mine")
        os.chown(new / "home/user/notes", 1000, 1000)
        os.symlink("/etc/shadow", new / "home/user/shadow")  # kept, never followed
        os.symlink("..", new / "home/user/up")
        os.symlink("/", new / "root-link")
        os.mknod(new / "etc/removed", stat.S_IFCHR, os.makedev(0, 0))  # a whiteout
        (new / "var/cache").mkdir(parents=True)
        os.setxattr(new / "var/cache", OPAQUE_XATTR, b"y")
        os.mkfifo(new / "var/pipe", 0o620)
        os.utime(new / "etc/hostname", (1_600_000_000, 1_600_000_000))

    path, _ = store.add(name, fill)
    return path


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below `root` as the store keeps it (never following a link)."""
    entries: dict[str, tuple[object, ...]] = {}
    inodes: dict[int, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (
            ["", *dirnames, *filenames] if dirpath == str(root) else [*dirnames, *filenames]
        ):
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            what: tuple[object, ...] = (st.st_mode, st.st_uid, st.st_gid)
            if stat.S_ISLNK(st.st_mode):
                what += (os.readlink(path),)
            elif stat.S_ISCHR(st.st_mode):  # a whiteout: a tar's `.wh.` entry has no times
                what += (st.st_rdev,)
            else:
                xattrs = {a: os.getxattr(path, a) for a in sorted(os.listxattr(path))}
                what += (xattrs, int(st.st_mtime))
            if stat.S_ISREG(st.st_mode):
                what += (Path(path).read_bytes(), inodes.setdefault(st.st_ino, rel))
            entries[rel] = what
    return entries


def pushed(remote: LayerRegistry, tmp_path: Path) -> tuple[LayerRegistry, Path, LayerStore]:
    """A layer made in one store and pushed to `remote` (named after its repository), and
    another, empty store to pull it into."""
    here, there = LayerStore(tmp_path / "a"), LayerStore(tmp_path / "b")
    layer = make_layer(here, f"step-{remote.repository.rsplit('/', 1)[-1]}")
    assert remote.push(layer, here)
    return remote, layer, there


def test_a_pushed_layer_is_pulled_back_as_it_was(
    registry: Registry, tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    remote, layer, there = pushed(connect(registry_url(registry, "test/roundtrip")), tmp_path)
    assert remote.has("step-roundtrip")
    pulled = remote.pull("step-roundtrip", there)
    assert pulled == there.path("step-roundtrip")
    assert tree(pulled) == tree(layer)
    assert os.readlink(pulled / "root-link") == "/"
    assert (pulled / os.fsdecode(b"etc/not-utf8-\xff\nname")).read_text() == "odd"
    assert stat.S_ISCHR(os.lstat(pulled / "etc/removed").st_mode)
    assert os.getxattr(pulled / "var/cache", OPAQUE_XATTR) == b"y"
    assert os.lstat(pulled / "bin/tool").st_ino == os.lstat(pulled / "bin/tool-again").st_ino
    assert [p.name for p in layer.parent.iterdir() if p.name.startswith(".pull-")] == []
    assert [p.name for p in there.dir.iterdir() if p.name.startswith((".pull-", ".new-"))] == []


def test_what_the_registry_has_is_not_uploaded_again(
    registry: Registry, tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    store = LayerStore(tmp_path / "layers")
    layer = make_layer(store, "step-once")
    remote = connect(registry_url(registry, "test/once"))
    assert remote.push(layer, store)
    blobs = sorted((registry.dir / "data/docker/registry/v2/blobs").rglob("data"))
    before = {b: os.stat(b).st_ino for b in blobs}
    assert not remote.push(layer, store)  # the tag is there: nothing read, nothing sent
    # The same files under another name: its blobs are there, only a manifest is new.
    os.system(f"cp -a {layer} {store.path('step-twice')}")  # noqa: S605
    assert remote.push(store.path("step-twice"), store)
    assert remote.has("step-twice")
    after = sorted((registry.dir / "data/docker/registry/v2/blobs").rglob("data"))
    assert {b: os.stat(b).st_ino for b in after} == before  # its manifest is the same blob too


def test_a_layer_the_registry_lacks_is_a_clear_error(
    registry: Registry, tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    store = LayerStore(tmp_path / "layers")
    remote = connect(registry_url(registry, "test/empty"))
    with pytest.raises(RegistryError, match="no manifests/step-nowhere"):
        remote.pull("step-nowhere", store)
    assert store.layers() == []


def test_a_registry_that_is_down_leaves_nothing(
    tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    store = LayerStore(tmp_path / "layers")
    layer = make_layer(store, "step-down")
    remote = connect(f"http://127.0.0.1:{free_port()}/test/down")
    with pytest.raises(RegistryError, match="cannot be reached"):
        remote.pull("step-elsewhere", store)
    with pytest.raises(RegistryError, match="cannot be reached"):
        remote.push(layer, store)
    assert store.layers() == [layer]
    assert [p for p in store.dir.iterdir() if p.name.startswith((".pull-", ".new-"))] == []


def test_a_tampered_blob_is_refused_and_nothing_is_left(
    registry: Registry, tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    remote, _, there = pushed(connect(registry_url(registry, "test/tampered")), tmp_path)
    links = registry.dir / "data/docker/registry/v2/repositories/test/tampered/_layers/sha256"
    blobs = [registry.blob_file(f"sha256:{link.name}") for link in links.iterdir()]
    biggest = max(blobs, key=lambda p: p.stat().st_size)  # the layer's tar, not its config
    with open(biggest, "r+b") as f:
        f.seek(100)
        f.write(b"X")
    with pytest.raises(ImageError, match="has digest"):
        remote.pull("step-tampered", there)
    assert there.layers() == []
    assert [p for p in there.dir.iterdir() if p.name.startswith((".pull-", ".new-"))] == []


def test_a_private_registry_takes_its_account(
    tmp_path: Path, connect: Callable[..., LayerRegistry]
) -> None:
    store = LayerStore(tmp_path / "layers")
    layer = make_layer(store, "step-private")
    with registry_server(ACCOUNT) as private:
        refused = connect(registry_url(private))
        with pytest.raises(RegistryError, match="HTTP 401"):
            refused.push(layer, store)
        remote = connect(registry_url(private), Credentials(*ACCOUNT))
        assert remote.push(layer, store)
        assert remote.has("step-private")


def test_plain_http_only_to_loopback() -> None:
    with pytest.raises(NotAllowed, match="plain http only"):
        LayerRegistry("http://registry.example:5000/layers")
    with pytest.raises(NotAllowed, match="http"):
        LayerRegistry("ftp://127.0.0.1/layers")
    assert LayerRegistry("https://registry.example/team/layers").repository == "team/layers"
