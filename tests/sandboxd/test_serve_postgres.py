"""`sandboxd serve --database-url postgresql://...`: the store in a PostgreSQL database (Debian's
server, started for the run) instead of SQLite in the state directory. A sandbox created,
listed and killed through the API, its row in the database; a restart that adopts it; the
command line's key and template commands on the same database; 503 while the database server
is away, and serving again once it is back."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import psycopg
import pytest

from sandboxd.daemon.serve import DATABASE_URL_ENV
from sandboxd.store.sqlite.database import DB_FILE
from tests.sandboxd.serving import NO_NETWORK, running_sandboxd, wait_gone
from tests.store.postgres_server import PostgresServer

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql).fetchall()


def _sandboxd(*args: str, url: str) -> str:
    """What a command of sandboxd's CLI prints, given the database by the environment."""
    done = subprocess.run([sys.executable, "-m", "sandboxd", *args], check=True,
                          capture_output=True, text=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", DATABASE_URL_ENV: url})  # fmt: skip
    return done.stdout


def test_a_sandbox_lives_in_the_database_and_is_adopted_after_a_restart(
    tmp_path: Path, base_template: Path, postgres_url: str
) -> None:
    state = tmp_path / "state"
    flags = (NO_NETWORK, "--database-url", postgres_url)
    with running_sandboxd(state, base_template, *flags) as server:
        with server.client() as api:
            created = api.post("/sandboxes", json={"templateID": "base", "timeout": 300,
                                                   "metadata": {"who": "pg"}})  # fmt: skip
            assert created.status_code == 201, created.text
            sandbox_id = created.json()["sandboxID"]
            listed = api.get("/v2/sandboxes").json()
            assert [(s["sandboxID"], s["metadata"]) for s in listed] == [
                (sandbox_id, {"who": "pg"})
            ]
            before = api.get(f"/sandboxes/{sandbox_id}").json()
        assert _rows(postgres_url, "SELECT sandbox_id, state FROM sandboxes") == [
            (sandbox_id, "running")
        ]
        assert not (state / DB_FILE).exists()  # nothing of the store in the state directory
        server.stop()
        server.start()
        with server.client() as api:
            assert api.get(f"/sandboxes/{sandbox_id}").json() == before
            assert server.envd(sandbox_id, "GET", "/health")[0] == 204
            assert api.delete(f"/sandboxes/{sandbox_id}").status_code == 204
            wait_gone(api, sandbox_id, 30)
            assert api.get("/v2/sandboxes").json() == []
        assert _rows(postgres_url, "SELECT sandbox_id FROM sandboxes") == []
        assert server.traces(sandbox_id) == []


def test_the_command_line_uses_the_same_database(
    tmp_path: Path, base_template: Path, postgres_url: str
) -> None:
    state = tmp_path / "state"
    with running_sandboxd(
        state, base_template, NO_NETWORK, "--database-url", postgres_url
    ) as server:
        key = _sandboxd("api-key", "create", "--state-dir", str(state), url=postgres_url).strip()
        with server.client() as api:
            answer = api.get("/templates", headers={"X-API-Key": key})
        assert answer.status_code == 200
        assert [t["aliases"] for t in answer.json()] == [["base"]]
        listing = _sandboxd("template", "ls", "--state-dir", str(state), url=postgres_url)
        assert "base" in listing.splitlines()[1]


def test_a_database_away_answers_503_until_it_is_back(tmp_path: Path, base_template: Path) -> None:
    database = PostgresServer()  # of this test's own: it is stopped halfway
    try:
        database.start()
        url = database.create_database()
        flags = (NO_NETWORK, "--database-url", url)
        server = running_sandboxd(tmp_path / "state", base_template, *flags)
        with server as serving, serving.client() as api:
            database.halt()
            away = api.get("/templates")
            assert away.status_code == 503
            assert "the database is unavailable" in away.json()["message"]
            database.launch()
            assert api.get("/templates").status_code == 200
    finally:
        database.stop()


def test_a_database_url_of_another_kind_is_refused(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "sandboxd", "api-key", "create", "--state-dir", str(tmp_path),
         "--database-url", "mysql://db/sandboxd"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--database-url must be a postgresql:// URL, not mysql://" in refused.stderr
