"""A root file system for the self-contained artifact's booted tests (scripts/test-artifact): a
debootstrap stage of SUITE (cached like the base template's, sandboxd/builds/base_image.py), optionally
with every Python package purged, the artifact installed by `install.sh --artifact --root
--enable`, and the base template's slimmed boot. Removes what it built if a step fails.

    python -m tests.packaging.artifact_root --suite bullseye --artifact TARBALL --output DIR
        [--remove-python] [--stage-cache DIR]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from sandboxd.builds.base_image import PACKAGES, ensure_stage, install_envd, slim_boot
from sandboxd.host.removal import remove_tree

log = logging.getLogger("artifact_root")
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}


def purge_python(root: Path) -> None:
    """Remove Python from the image entirely (every python*/libpython* package, versioned ones
    included), and prove it: no python* program is left."""
    listed = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}\\n"],
        env=CHROOT_ENV,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    packages = [p for p in listed if p.startswith(("python", "libpython"))]
    subprocess.run(
        ["chroot", str(root), "apt-get", "purge", "-y", "-qq", "--auto-remove", *packages],
        env=CHROOT_ENV,
        check=True,
        capture_output=True,
    )
    left = [str(p) for d in ("usr/bin", "usr/local/bin") for p in (root / d).glob("python*")]
    if left:
        raise RuntimeError(f"Python is still in the image: {left}")


def build(suite: str, artifact: Path, output: Path, cache: Path, remove_python: bool) -> None:
    stage = ensure_stage(cache, suite, PACKAGES)
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(stage), str(output)], check=True)
        if remove_python:
            purge_python(output)
        install_envd(output, artifact=artifact)
        slim_boot(output)
    except BaseException:
        remove_tree(output)
        raise


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="artifact_root: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--stage-cache", type=Path, default=Path("/var/cache/envd-image"))
    parser.add_argument("--remove-python", action="store_true")
    args = parser.parse_args()
    build(args.suite, args.artifact.resolve(), args.output, args.stage_cache, args.remove_python)
    log.info("%s root with the artifact at %s", args.suite, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
