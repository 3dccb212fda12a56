"""`sandboxd team create NAME`, `sandboxd team ls` and `sandboxd api-key create [--team
NAME|ID]`: the teams of a store and their keys, from the command line (beside a running serve
or without one, on SQLite or the PostgreSQL database serve uses). A key sees only its team's
sandboxes, templates, snapshots and volumes; without `--team` a key is the default team's,
the one a single user has."""

from __future__ import annotations

import re
import sys
import uuid
from typing import TYPE_CHECKING

from sandboxd.daemon.serve import new_api_key
from sandboxd.errors import NotAllowed
from sandboxd.ids import now_us, rfc3339
from sandboxd.store.rows import DEFAULT_TEAM_ID, TeamRow

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from sandboxd.store.interface import Store

MAX_NAME = 100
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def add_parsers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    store_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """The `team` and `api-key` commands."""
    team = commands.add_parser("team", help="manage teams (each key sees only its team's)")
    team_commands = team.add_subparsers(dest="team_command", required=True)
    create = team_commands.add_parser(
        "create", help="make a team", description="Make a team and print its id."
    )
    create.add_argument("name", metavar="NAME")
    ls = team_commands.add_parser("ls", help="list the teams")
    api_key = commands.add_parser("api-key", help="manage API keys")
    key_commands = api_key.add_subparsers(dest="key_command", required=True)
    new_key = key_commands.add_parser(
        "create",
        help="print a new API key and store its hash",
        description="Print a new API key (e2b_ and 40 hex digits) of a team; only its hash is "
        "stored.",
    )
    new_key.add_argument(
        "--team", metavar="NAME|ID", help="the key's team (default: the default team)"
    )
    for p in (create, ls, new_key):
        store_options(p)


def run(args: argparse.Namespace, store: Store) -> None:
    """Raises NotAllowed: a bad or taken team name, or an unknown team."""
    if args.command == "api-key":
        team_id = DEFAULT_TEAM_ID if args.team is None else _team(store, args.team).team_id
        key = new_api_key()
        store.add_key(key, now_us(), team_id)
        sys.stdout.write(key + "\n")
    elif args.team_command == "create":
        sys.stdout.write(_create(store, args.name).team_id + "\n")
    else:
        sys.stdout.write(f"{'TEAM':36} {'NAME':24} {'SLUG':24} CREATED\n")
        for t in store.teams():
            sys.stdout.write(f"{t.team_id:36} {t.name:24} {t.slug:24} {rfc3339(t.created_at)}\n")


def slug_of(name: str) -> str:
    """The namespace of a team's names: its name lower-cased, other characters than letters
    and digits as one `-`."""
    return _NOT_SLUG.sub("-", name.lower()).strip("-")


def _create(store: Store, name: str) -> TeamRow:
    name = name.strip()
    slug = slug_of(name)
    if not slug or len(name) > MAX_NAME:
        raise NotAllowed(f"team name {name!r}: 1 to {MAX_NAME} characters, a letter or digit")
    taken = next((t for t in store.teams() if name in (t.name, t.team_id) or t.slug == slug), None)
    if taken is not None:
        raise NotAllowed(f"team name {name!r} is taken by team {taken.name!r} ({taken.slug})")
    team = TeamRow(str(uuid.uuid4()), name, slug, now_us())
    store.add_team(team)
    return team


def _team(store: Store, ref: str) -> TeamRow:
    team = store.team(ref)
    if team is None:
        raise NotAllowed(f"no team {ref!r} (sandboxd team ls lists them)")
    return team
