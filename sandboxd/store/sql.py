"""SQL that the store's backends share: both SQLite and PostgreSQL take the same upsert of a
row's fields."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from _typeshed import DataclassInstance


def row_upsert(
    table: str,
    row: DataclassInstance,
    json_fields: tuple[str, ...],
    as_json: Callable[[object], object],
    mark: str,
) -> tuple[str, list[object]]:
    """The upsert of `row` (its fields the columns) into `table` and its values, the fields
    named in `json_fields` passed through the backend's `as_json` (None stays NULL)."""
    fields = dataclasses.fields(row)
    values = [
        as_json(v) if f.name in json_fields and v is not None else v
        for f, v in zip(fields, dataclasses.astuple(row), strict=True)
    ]
    return upsert(table, [f.name for f in fields], mark), values


def upsert(table: str, names: list[str], mark: str) -> str:
    """An INSERT of `names` into `table` that replaces the row of the same key, the first name
    (a row's first field is its key). A clash on another unique column (a template's alias)
    is the backend's integrity error, not a deletion of the row holding it.

    `mark` is the backend's placeholder ("?" for SQLite, "%s" for PostgreSQL)."""
    updates = ", ".join(f"{n} = excluded.{n}" for n in names[1:])
    marks = ", ".join([mark] * len(names))
    return (
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks}) "  # noqa: S608  # names are ours
        f"ON CONFLICT ({names[0]}) DO UPDATE SET {updates}"
    )


# A template by id (whoever's), else the team's by alias, else a public one by alias, the
# oldest: `template_lookup` gives its values. In PostgreSQL's placeholders; SQLite's replace them.
TEMPLATE_LOOKUP = (
    "SELECT * FROM templates WHERE template_id = %s OR (alias = %s AND (team_id = %s OR public)) "
    "ORDER BY template_id = %s DESC, team_id = %s DESC, created_at, template_id LIMIT 1"
)


def template_lookup(id_or_alias: str, team_id: str) -> tuple[str, ...]:
    return id_or_alias, id_or_alias, team_id, id_or_alias, team_id


def node_heartbeat(mark: str) -> str:
    """The upsert of a NodeRow's heartbeat (its fields in order) that keeps a row's `draining`
    and returns it, with the backend's placeholder `mark`."""
    names = ["node_id", "api_url", "proxy_address", "heartbeat_us", "lease_s", "status"]
    marks = ", ".join([mark] * (len(names) + 1))
    updates = ", ".join(f"{n} = excluded.{n}" for n in names[1:])
    return (
        f"INSERT INTO nodes ({', '.join(names)}, draining) VALUES ({marks}) "  # noqa: S608  # names are ours
        f"ON CONFLICT (node_id) DO UPDATE SET {updates} RETURNING draining"
    )
