"""Command line with the reference envd's flag spellings (Go `flag`: -x and --x both work)."""

from __future__ import annotations

import argparse
import importlib

from envd.settings import DEFAULT_CGROUP_ROOT, DEFAULT_PORT, ENVD_VERSION, Settings


def build_commit() -> str:
    """The commit packaging/install.sh wrote into envd/_build.py; "unknown" in a source tree."""
    try:
        build = importlib.import_module("envd._build")
    except ModuleNotFoundError:
        return "unknown"
    return str(build.COMMIT)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="envd", description="E2B-compatible sandbox daemon")
    p.add_argument("-port", "--port", type=int, default=DEFAULT_PORT, help="TCP port to listen on")
    p.add_argument("-bind", "--bind", default="0.0.0.0", help="address to listen on")
    p.add_argument("-version", "--version", action="version", version=ENVD_VERSION)
    p.add_argument(
        "-commit", "--commit", action="version", version=build_commit(), help="print the commit"
    )
    p.add_argument(
        "-isnotfc", "--isnotfc", action="store_true", help="not running as the sandbox VM's daemon"
    )
    p.add_argument("-verbose", "--verbose", action="store_true", help="log debug events")
    p.add_argument("-cgroup-root", "--cgroup-root", default=DEFAULT_CGROUP_ROOT)
    p.add_argument("-no-cgroups", "--no-cgroups", action="store_true")
    return p


def parse_settings(argv: list[str] | None = None) -> Settings:
    """Parse the command line into Settings; -version and -commit print and exit here."""
    args = _parser().parse_args(argv)
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
    # Imported here so -version answers without loading the server stack.
    from envd.server import serve

    return serve(settings)
