"""Paths as records keep them (sandboxd.layers.portable): written by one state directory, read
by another: a build's image, a template's root filesystem, a disk-paused sandbox's record."""

from __future__ import annotations

from pathlib import Path

from sandboxd.host.cgroups import Limits
from sandboxd.layers.portable import recorded, resolved
from sandboxd.lifecycle.disk_pause import boot_image, disk_image
from sandboxd.runtime.spec import BootImage
from sandboxd.templates.image import TemplateImage

WRITER = Path("/srv/node-a/state")
READER = Path("/var/lib/node-b")


def test_a_path_in_the_state_directory_is_kept_relative_and_read_in_the_readers() -> None:
    kept = recorded(WRITER / "layers" / "sha256-ab", WRITER)
    assert kept == "layers/sha256-ab"
    assert resolved(kept, READER) == READER / "layers" / "sha256-ab"


def test_a_path_outside_it_stays_absolute_both_ways() -> None:
    assert recorded("/opt/rootfs", WRITER) == "/opt/rootfs"
    assert resolved("/opt/rootfs", READER) == Path("/opt/rootfs")
    assert recorded(Path("/srv/node-a/statewide/l"), WRITER) == "/srv/node-a/statewide/l"


def test_a_builds_image_is_read_on_another_machine_with_its_layers_there() -> None:
    image = TemplateImage((str(WRITER / "templates/base/rootfs"), str(WRITER / "layers/step-1")),
                          "systemd", {"A": "1"}, start_cmd="run")  # fmt: skip
    record = image.record(WRITER)
    assert record["layers"] == ["templates/base/rootfs", "layers/step-1"]
    read = TemplateImage.from_record(record, READER)
    assert read.layer_paths == (READER / "templates/base/rootfs", READER / "layers/step-1")
    assert (read.env, read.start_cmd, read.init) == ({"A": "1"}, "run", "systemd")


def test_a_record_from_before_keeps_its_absolute_layers() -> None:
    old = {"layers": ["/old/state/layers/x"], "init": "envd"}
    assert TemplateImage.from_record(old, READER).layers == ("/old/state/layers/x",)
    assert TemplateImage.of_rootfs("/old/rootfs", READER).layers == ("/old/rootfs",)


def test_a_disk_paused_sandbox_boots_its_layers_on_the_reading_machine() -> None:
    booted = BootImage((WRITER / "templates/base/rootfs",), "systemd", io_uring=False)
    limits = Limits(1 << 29, 2, 4096)
    record = disk_image(booted, limits, (), WRITER / "layers/pause-s-1", WRITER)
    assert record["layers"] == ["templates/base/rootfs", "layers/pause-s-1"]
    image, read_limits = boot_image(record, READER)
    assert image.layers == (READER / "templates/base/rootfs", READER / "layers/pause-s-1")
    assert read_limits == limits
