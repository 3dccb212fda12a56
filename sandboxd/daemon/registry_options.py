"""The options that share a machine's layers through an OCI registry (serve's, and the node
agent's): `--registry URL`, its account from `--registry-user` with the password in the
environment (never on a command line, which every user of the host can read), or a bearer
token in the environment (a registry behind a token service: the token it issued)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sandboxd.errors import NotAllowed
from sandboxd.images.layer_registry import LayerRegistry
from sandboxd.images.skopeo import Credentials

if TYPE_CHECKING:
    import argparse

PASSWORD_ENV = "SANDBOXD_REGISTRY_PASSWORD"  # noqa: S105  # a name, not a password
TOKEN_ENV = "SANDBOXD_REGISTRY_TOKEN"  # noqa: S105  # the variable's name, not a token


def add_registry_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry",
        metavar="URL",
        help="push template, snapshot and pause-to-disk layers to this OCI registry and pull "
        "the layers a sandbox lacks from it: https://HOST[:PORT][/REPOSITORY] (plain http only "
        "to 127.0.0.1/localhost; default repository sandboxd/layers)",
    )
    p.add_argument(
        "--registry-user",
        metavar="USER",
        help=f"the registry account (its password in ${PASSWORD_ENV}; or a bearer token in "
        f"${TOKEN_ENV})",
    )


def layer_registry(args: argparse.Namespace) -> LayerRegistry | None:
    """The registry the options name, or None without --registry.

    Raises:
        NotAllowed: a bad URL, or --registry-user without its password.
    """
    if args.registry is None:
        if args.registry_user is not None:
            raise NotAllowed("--registry-user needs --registry")
        return None
    credentials = None
    if args.registry_user is not None:
        password = os.environ.get(PASSWORD_ENV)
        if not password:
            raise NotAllowed(f"--registry-user needs the password in ${PASSWORD_ENV}")
        credentials = Credentials(args.registry_user, password)
    return LayerRegistry(args.registry, credentials, os.environ.get(TOKEN_ENV) or None)
