"""Remove and Move refuse an empty path, and Remove refuses the user's home and any directory
holding it (a deliberate difference: the reference resolves "" to the home and deletes it).

Filesystem RPCs run as root whatever the Basic-auth user, who only decides what `~`, "" and
relative paths mean. So every request here is made as a throwaway user whose home is in a
temp dir: were the guard missing, only that temp dir could be lost.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.envd_process import EnvdProcess

pytestmark = pytest.mark.root  # useradd

RPC = "/filesystem.Filesystem"


@dataclass
class Throwaway:
    name: str
    home: Path
    headers: dict[str, str]


@pytest.fixture
def throwaway(workdir: Path) -> Iterator[Throwaway]:
    """A user whose home is <workdir>/parent/home, holding a file `keep`."""
    name = "envd-rm-" + secrets.token_hex(4)  # unique: envd remembers users for a second
    home = workdir / "parent" / "home"
    home.parent.mkdir()
    subprocess.run(
        ["useradd", "--home-dir", str(home), "--create-home", "--shell", "/bin/sh", name],
        check=True,
        capture_output=True,
    )
    (home / "keep").write_text("still here")
    auth = "Basic " + base64.b64encode(f"{name}:".encode()).decode()
    try:
        yield Throwaway(name, home, {"authorization": auth})
    finally:
        subprocess.run(["userdel", name], check=True, capture_output=True)


def _call(
    envd: EnvdProcess, rpc: str, body: dict[str, str], headers: dict[str, str]
) -> httpx.Response:
    return httpx.post(f"{envd.url}{RPC}/{rpc}", json=body, headers=headers, timeout=30)


def _assert_refused(r: httpx.Response, message: str) -> None:
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "invalid_argument"
    assert message in r.json()["message"]


def _assert_home_intact(user: Throwaway) -> None:
    assert (user.home / "keep").read_text() == "still here"


@pytest.mark.parametrize("legacy_sdk", [False, True], ids=["sdk", "legacy-sdk"])
def test_remove_empty_path(envd: EnvdProcess, throwaway: Throwaway, legacy_sdk: bool) -> None:
    headers = {**throwaway.headers, **({"user-agent": "connect-python"} if legacy_sdk else {})}
    _assert_refused(_call(envd, "Remove", {"path": ""}, headers), "path is empty")
    _assert_home_intact(throwaway)


HOME_SPELLINGS = ["~", "~/", ".", "./", "{home}", "{home}/", "{home}/.", "/{home}", "{link}/home"]


@pytest.mark.parametrize("spelling", HOME_SPELLINGS)
def test_remove_home(envd: EnvdProcess, throwaway: Throwaway, spelling: str) -> None:
    (throwaway.home.parent.parent / "link").symlink_to(throwaway.home.parent)
    path = spelling.format(home=throwaway.home, link=throwaway.home.parent.parent / "link")
    r = _call(envd, "Remove", {"path": path}, throwaway.headers)
    _assert_refused(r, "it is the user's home directory")
    _assert_home_intact(throwaway)


def test_remove_directory_holding_home(envd: EnvdProcess, throwaway: Throwaway) -> None:
    r = _call(envd, "Remove", {"path": str(throwaway.home.parent)}, throwaway.headers)
    _assert_refused(r, "it contains the user's home directory")
    _assert_home_intact(throwaway)


def test_remove_inside_home_and_links_to_it_still_work(
    envd: EnvdProcess, throwaway: Throwaway
) -> None:
    (throwaway.home / "sub").mkdir()
    (throwaway.home / "sub" / "f").write_text("x")
    link = throwaway.home.parent / "home-link"
    link.symlink_to(throwaway.home)  # Remove takes the link away, never its target
    for path in ["~/sub", str(link)]:
        r = _call(envd, "Remove", {"path": path}, throwaway.headers)
        assert r.status_code == 200, r.text
    assert not (throwaway.home / "sub").exists()
    assert not link.is_symlink()
    _assert_home_intact(throwaway)


def test_move_empty_source_or_destination(envd: EnvdProcess, throwaway: Throwaway) -> None:
    elsewhere = str(throwaway.home.parent / "moved")
    r = _call(envd, "Move", {"source": "", "destination": elsewhere}, throwaway.headers)
    _assert_refused(r, "source path is empty")
    r = _call(envd, "Move", {"source": "~/keep", "destination": ""}, throwaway.headers)
    _assert_refused(r, "destination path is empty")
    _assert_home_intact(throwaway)
