"""Command line with the reference envd's flag spellings (Go `flag`: -x and --x both work)."""

from __future__ import annotations

import argparse
import sys

from envd.settings import DEFAULT_CGROUP_ROOT, DEFAULT_PORT, ENVD_VERSION, Settings

# Build commit, stamped into the installed package by packaging; "unknown" in a source tree.
COMMIT = "unknown"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="envd", description="E2B-compatible sandbox daemon")
    p.add_argument("-port", "--port", type=int, default=DEFAULT_PORT, help="TCP port to listen on")
    p.add_argument("-bind", "--bind", default="0.0.0.0", help="address to listen on")
    p.add_argument("-version", "--version", action="store_true", help="print the version and exit")
    p.add_argument("-commit", "--commit", action="store_true", help="print the commit and exit")
    p.add_argument(
        "-isnotfc", "--isnotfc", action="store_true", help="not running as the sandbox VM's daemon"
    )
    p.add_argument("-verbose", "--verbose", action="store_true", help="log debug events")
    p.add_argument("-cgroup-root", "--cgroup-root", default=DEFAULT_CGROUP_ROOT)
    p.add_argument("-no-cgroups", "--no-cgroups", action="store_true")
    return p


def parse_settings(argv: list[str] | None = None) -> Settings | str:
    """Parse the command line into Settings, or the text to print for -version / -commit."""
    args = _parser().parse_args(argv)
    if args.version:
        return ENVD_VERSION
    if args.commit:
        return COMMIT
    return Settings(
        port=args.port,
        host=args.bind,
        isnotfc=args.isnotfc,
        verbose=args.verbose,
        cgroup_root=args.cgroup_root,
        no_cgroups=args.no_cgroups,
    )


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    if isinstance(settings, str):
        sys.stdout.write(settings + "\n")
        return 0
    # Imported here so -version answers without loading the server stack.
    from envd.server import serve

    return serve(settings)
