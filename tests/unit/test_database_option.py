"""--database-url, one definition (sandboxd.daemon.flags.add_database_option) in every command
that opens a store: serve, the store's commands (api keys, teams, templates), the gateway, the
node agent and its drain and undrain. Each takes $SANDBOXD_DATABASE_URL as its default, and a
drain's own flag does not replace its `node` command's."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import pytest

from sandboxd.cli import _parser
from sandboxd.daemon.serve import DATABASE_URL_ENV

if TYPE_CHECKING:
    from collections.abc import Iterator

URL = "postgresql://sandboxd@db.example:5432/sandboxd"


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:  # fmt: skip
    """Every (sub)command's words and parser."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _database_options(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], argparse.Action]:
    return {
        path: action
        for path, command in _commands(parser)
        for action in command._actions
        if "--database-url" in action.option_strings
    }


def test_every_command_that_opens_a_store_has_the_option() -> None:
    found = {" ".join(path) for path in _database_options(_parser())}
    assert {"serve", "gateway", "node", "node drain", "node undrain", "api-key create",
            "team create", "template ls"} <= found  # fmt: skip


def test_the_variable_is_each_ones_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, URL)
    options = _database_options(_parser())
    drains = {("node", "drain"), ("node", "undrain")}
    assert {path for path, o in options.items() if o.default == URL} == set(options) - drains
    assert all(options[path].default == argparse.SUPPRESS for path in drains)  # node's
    for argv in (["node", "drain", "n1"], ["gateway"], ["serve"], ["team", "create", "t"]):
        assert _parser().parse_args(argv).database_url == URL


@pytest.mark.parametrize("variable", [None, "postgresql://variable/sandboxd"])
def test_a_drain_takes_its_own_flag_else_its_commands(
    variable: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if variable is None:
        monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    else:
        monkeypatch.setenv(DATABASE_URL_ENV, variable)
    other = "postgresql://elsewhere/sandboxd"
    parser = _parser()
    assert parser.parse_args(["node", "--database-url", URL, "drain", "n1"]).database_url == URL
    assert parser.parse_args(["node", "drain", "n1", "--database-url", other]).database_url == other
    assert parser.parse_args(["node", "drain", "n1"]).database_url == variable
    assert parser.parse_args(["serve"]).database_url == variable


def test_one_help_whichever_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    shared = {action.help for action in _database_options(_parser()).values()}
    assert len(shared) == 2  # the cluster's database, or a store's with SQLite otherwise
    assert all(f"(default ${DATABASE_URL_ENV}" in text for text in shared if text)
