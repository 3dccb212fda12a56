"""sandboxd's command line: `sandboxd template build-base` for now (serve comes with the API)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sandboxd.errors import SandboxError
from sandboxd.images import build_base

DEFAULT_STATE_DIR = Path("/var/lib/sandboxd")


def base_rootfs(state_dir: Path) -> Path:
    """Where the base template's root filesystem lives in a state directory."""
    return state_dir / "templates" / "base" / "rootfs"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandboxd", description="E2B-compatible sandbox host")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    template = commands.add_parser("template", help="manage templates")
    template_commands = template.add_subparsers(dest="template_command", required=True)
    build = template_commands.add_parser(
        "build-base",
        help="build the base template (Debian bookworm, systemd, python, user, envd)",
        description="Build the base template's root filesystem with debootstrap and "
        "packaging/install.sh; the debootstrap stage is cached and reused while its recipe holds.",
    )
    build.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help=f"sandboxd's state directory (default {DEFAULT_STATE_DIR})",
    )
    build.add_argument(
        "--stage-cache",
        type=Path,
        help="where the debootstrap stage is cached (default STATE_DIR/cache)",
    )
    build.add_argument(
        "--output",
        type=Path,
        help="build the root filesystem here instead of STATE_DIR/templates/base/rootfs",
    )
    build.add_argument("--commit", help="the build commit envd reports (default: git HEAD)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="sandboxd: %(message)s", stream=sys.stderr)
    state_dir: Path = args.state_dir.absolute()
    try:
        build_base(
            (args.output or base_rootfs(state_dir)).absolute(),
            (args.stage_cache or state_dir / "cache").absolute(),
            args.commit,
        )
    except SandboxError as exc:
        # argparse's convention for usage errors, and ours for everything the user must fix.
        parser.exit(2, f"sandboxd: {exc}\n")
    except KeyboardInterrupt:
        return 130
    return 0
