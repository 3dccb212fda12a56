"""Boot images without booting: a sandbox record keeps its init (and one from before init modes
reads as systemd), and what each init needs in the layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandboxd.errors import TemplateError
from sandboxd.host.cgroups import Limits
from sandboxd.runtime.nspawn.container import ENVD_LAUNCHER, command, require_rootfs
from sandboxd.runtime.spec import BootImage, SandboxSpec, read_record, write_record


def test_a_record_keeps_its_init_and_older_records_are_systemd(tmp_path: Path) -> None:
    spec = SandboxSpec("a1", (Path("/l0"), Path("/l1")), Limits(), 524288, 0, init="envd")
    assert SandboxSpec.from_json(spec.to_json()) == spec
    record = json.loads(spec.to_json())
    del record["init"]  # written by a sandboxd from before boot images had an init
    assert SandboxSpec.from_json(json.dumps(record)).init == "systemd"
    record["init"] = "sysvinit"
    (tmp_path / "sandbox.json").write_text(json.dumps(record))
    assert read_record(tmp_path) is None
    write_record(tmp_path, spec)
    assert read_record(tmp_path) == spec


def test_each_init_has_its_nspawn_command() -> None:
    booted = command(Path("/r"), "m")
    assert "--boot" in booted
    assert "--as-pid2" not in booted
    stub = command(Path("/r"), "m", "envd", ["--rlimit=NPROC=1:2"])
    assert "--boot" not in stub
    assert stub[-3:] == ["--", ENVD_LAUNCHER, "-isnotfc"]
    assert {"--as-pid2", "--rlimit=NOFILE=1048576", "--private-network"} <= set(stub)
    assert {"--private-users=0:65536", "--rlimit=NPROC=1:2"} <= set(stub)


def _layer(base: Path, name: str, *files: str) -> Path:
    layer = base / name
    layer.mkdir()
    for f in files:
        (layer / f).parent.mkdir(parents=True, exist_ok=True)
        (layer / f).write_text("")
    return layer


def test_what_each_init_needs_is_looked_for_in_every_layer(tmp_path: Path) -> None:
    image = _layer(tmp_path, "image", "sbin/init", "bin/sh")
    envd = _layer(tmp_path, "envd", ENVD_LAUNCHER.lstrip("/"))
    require_rootfs(BootImage((image, envd)))
    require_rootfs(BootImage((image, envd), "envd"))
    with pytest.raises(TemplateError, match="no /usr/lib/envd/bin/envd in the template's layers"):
        require_rootfs(BootImage((image,), "envd"))
    with pytest.raises(TemplateError, match="no /sbin/init in the template's layers"):
        require_rootfs(BootImage((envd,)))
    with pytest.raises(TemplateError, match="no template root filesystem at"):
        require_rootfs(BootImage((image, tmp_path / "missing"), "envd"))
    with pytest.raises(TemplateError, match="no layers"):
        require_rootfs(BootImage(()))


def test_a_layers_links_never_lead_the_look_into_the_host(tmp_path: Path) -> None:
    """A layer a sandbox wrote (a pause's) whose /sbin is an absolute link to a host directory
    that has an `init`: not found through the host, found through the image."""
    host = _layer(tmp_path, "host", "sbin/init")
    hostile = _layer(tmp_path, "hostile", "bin/sh")
    (hostile / "sbin").symlink_to(host / "sbin")
    with pytest.raises(TemplateError, match="no /sbin/init in the template's layers"):
        require_rootfs(BootImage((hostile,)))
    relative = _layer(tmp_path, "relative", "usr/sbin/init")
    (relative / "sbin").symlink_to("usr/sbin")  # the image's own link, resolved inside it
    require_rootfs(BootImage((relative,)))
