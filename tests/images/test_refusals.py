"""What a pull refuses, with a domain error and nothing left in the store: blobs whose content
is not their digest, layer entries that would leave their directory, images the registry does
not have, malformed references, and insecure pulls from anywhere but loopback."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandboxd.errors import ImageError, ImageNotFound, NotAllowed
from sandboxd.images import manifest, reference, skopeo
from sandboxd.images.pull import pull
from tests.images.oci_layout import Layer, layer_digest

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.layers.store import LayerStore
    from tests.images.registry import Registry

pytestmark = pytest.mark.root


def _layers_in(store: LayerStore) -> list[str]:
    """Every entry of the store but its lock files: no layer, no temporary directory."""
    return sorted(p.name for p in store.dir.iterdir() if p.name != ".locks")


def test_a_blob_altered_in_the_registry_is_refused(
    push: Callable[..., str], store: LayerStore, registry: Registry
) -> None:
    top = Layer().file("app", b"the real content")
    ref = push([Layer().file("base", b"b"), top])
    blob = registry.blob_file(layer_digest(top))
    blob.write_bytes(blob.read_bytes()[:-8] + b"\0" * 8)

    with pytest.raises(ImageError, match=r"(?i)digest"):
        pull(ref, store, insecure=True)
    assert _layers_in(store) == []


def test_a_blob_altered_after_the_copy_is_refused(push: Callable[..., str], tmp_path: Path) -> None:
    """sandboxd's own check, whatever skopeo checked on the way."""
    layer = Layer().file("app", b"content")
    ref = reference.parse(push([layer]))
    skopeo.copy_to_dir(ref, tmp_path / "image", tmp_path, insecure=True)
    blob = tmp_path / "image" / layer_digest(layer).removeprefix("sha256:")
    blob.write_bytes(blob.read_bytes() + b"\0")

    with pytest.raises(ImageError, match=f"blob {layer_digest(layer)} has digest sha256:"):
        manifest.read(tmp_path / "image")


def test_a_layer_whose_tar_is_not_its_diff_id_is_refused(
    push: Callable[..., str], store: LayerStore
) -> None:
    ref = push([Layer().file("base", b"b"), Layer().file("app", b"a")], wrong_diff_id=True)

    with pytest.raises(ImageError, match=r"its tar has digest sha256:.*the config says"):
        pull(ref, store, insecure=True)
    assert _layers_in(store) == [f"sha256-{layer_digest(Layer().file('base', b'b'))[7:]}"]


ESCAPES = {
    "dot-dot": (Layer().dir("etc").file("etc/../../escaped", b"x"), "'..' component"),
    "absolute path": (Layer().file("/escaped", b"x"), "absolute path"),
    "through a symlink": (
        Layer().symlink("etc", "/tmp").file("etc/escaped", b"x"),
        "not a directory",
    ),
    "through a relative symlink": (
        Layer().symlink("up", "..").file("up/escaped", b"x"),
        "not a directory",
    ),
    "hard link out": (Layer().hardlink("passwd", "../../etc/passwd"), "'..' component"),
    "hard link absolute": (Layer().hardlink("passwd", "/etc/passwd"), "absolute path"),
    "hard link through a symlink": (
        Layer().symlink("host", "/etc").hardlink("passwd", "host/passwd"),
        "not a directory",
    ),
}


@pytest.mark.parametrize("case", ESCAPES, ids=str)
def test_entries_leaving_the_layer_are_refused(
    case: str, push: Callable[..., str], store: LayerStore, tmp_path: Path
) -> None:
    layer, message = ESCAPES[case]
    ref = push([layer])

    with pytest.raises(ImageError, match=message):
        pull(ref, store, insecure=True)
    assert _layers_in(store) == []
    assert not (tmp_path / "escaped").exists()
    assert not (store.dir / "escaped").exists()


def test_links_pointing_out_are_kept_as_links(push: Callable[..., str], store: LayerStore) -> None:
    ref = push([Layer().symlink("passwd", "/etc/passwd").symlink("up", "../../..")])

    (layer,) = pull(ref, store, insecure=True).layers

    assert (layer / "passwd").readlink().as_posix() == "/etc/passwd"
    assert (layer / "up").readlink().as_posix() == "../../.."


def test_an_unknown_image_is_not_found(registry: Registry, store: LayerStore) -> None:
    with pytest.raises(ImageNotFound, match=f"image '{registry.host}/test/absent:latest'"):
        pull(f"{registry.host}/test/absent", store, insecure=True)
    assert _layers_in(store) == []


def test_an_unknown_tag_is_not_found(
    push: Callable[..., str], registry: Registry, store: LayerStore
) -> None:
    ref = push([Layer().file("x", b"x")])

    with pytest.raises(ImageNotFound, match="not found"):
        pull(ref.rsplit(":", 1)[0] + ":no-such-tag", store, insecure=True)


def test_a_registry_that_does_not_answer_is_a_clear_error(store: LayerStore) -> None:
    with pytest.raises(ImageError, match=r"pulling 127\.0\.0\.1:9/x:latest: .*"):
        pull("127.0.0.1:9/x", store, insecure=True)


@pytest.mark.parametrize(
    "ref", ["UPPER", "a//b", "name:", "name@sha256:abc", "name:bad/tag", "host:99999999/x"]
)
def test_malformed_references_are_refused(ref: str, store: LayerStore) -> None:
    with pytest.raises(ImageError, match=r"image|registry"):
        pull(ref, store)


def test_insecure_is_only_for_loopback(store: LayerStore) -> None:
    with pytest.raises(NotAllowed, match=r"insecure pulls only from 127\.0\.0\.1/localhost"):
        pull("registry.example.test/x", store, insecure=True)
    with pytest.raises(NotAllowed):
        pull("busybox", store, mirror="mirror.example.test", insecure=True)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("user/app:1.2", "docker.io/user/app:1.2"),
        ("localhost:5000/a/b", "localhost:5000/a/b:latest"),
        ("ghcr.io/o/r@sha256:" + "a" * 64, "ghcr.io/o/r@sha256:" + "a" * 64),
        ("ghcr.io/o/r:t@sha256:" + "b" * 64, "ghcr.io/o/r@sha256:" + "b" * 64),
    ],
)
def test_references_are_normalised_as_docker_does(ref: str, expected: str) -> None:
    assert str(reference.parse(ref)) == expected
