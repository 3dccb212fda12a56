"""What the record of a sandbox paused to disk boots (sandboxd.lifecycle.disk_pause.boot_image),
and the records it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxd.errors import SandboxError
from sandboxd.host.cgroups import Limits
from sandboxd.lifecycle.disk_pause import boot_image
from sandboxd.runtime.spec import BootImage

RECORD = {"layers": ["/l/base", "/l/pause-s-1"], "init": "envd", "io_uring": True,
          "limits": {"memory_bytes": 1 << 29, "cpus": 2, "pids": 4096}}  # fmt: skip


def test_a_record_boots_its_layers_init_and_limits() -> None:
    image, limits = boot_image(RECORD, Path("/state"))  # absolute: written before, as it is
    assert image == BootImage((Path("/l/base"), Path("/l/pause-s-1")), "envd", io_uring=True)
    assert limits == Limits(1 << 29, 2, 4096)


@pytest.mark.parametrize(
    "record",
    [None, {}, {**RECORD, "init": "sysvinit"}, {**RECORD, "limits": {"swap": 1}}],
)
def test_what_is_not_a_record_is_refused(record: dict[str, object] | None) -> None:
    with pytest.raises(SandboxError):
        boot_image(record, Path("/state"))
