"""Debian's PostgreSQL for tests: a server of the test run's own, its cluster made by initdb in
a temporary directory, listening on a free loopback port (and a unix socket in that directory,
nowhere else), a password for its one role, stopped by its pid at the end and its directory
removed. As root, the server runs as the `postgres` account (PostgreSQL refuses root); under
setpriv's --pdeathsig it dies with the test run, however that ends.

Its settings are the defaults but one: `synchronous_commit = off`, PostgreSQL's counterpart of
the SQLite store's `synchronous = NORMAL` (a commit is crash-safe but reaches the disk shortly
after it returns), so that the two backends are compared alike (bench/store_backends.py)."""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.sandboxd.serving import free_port
from tests.waiting import wait_until

_SERVER_ACCOUNT = "postgres"
_ROLE = "sandboxd"


def _bin_dir() -> Path:
    """The newest installed PostgreSQL's programs (Debian keeps them per major version)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3])
    )
    if not found:
        raise FileNotFoundError("no PostgreSQL server: apt-get install postgresql")
    return found[-1].parent


class PostgresServer:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sandboxd-test-pg-"))
        self.port = free_port()
        self.password = secrets.token_hex(16)
        self.log = self.dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._databases = itertools.count(1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{_ROLE}:{self.password}@127.0.0.1:{self.port}/{database}"

    def socket_url(self, url: str) -> str:
        """The database of `url` over the server's unix socket: reachable from a process in
        another network namespace, as loopback is not."""
        database = url.rsplit("/", 1)[1]
        return (f"postgresql://{_ROLE}:{self.password}@/{database}"
                f"?host={self.dir}&port={self.port}")  # fmt: skip

    def start(self) -> None:
        """Make the cluster and start the server; returns once it accepts connections."""
        as_server = self._as_server_account()
        password_file = self.dir / "password"
        password_file.write_text(self.password + "\n")
        self._hand_over(password_file)
        subprocess.run([*as_server, _bin_dir() / "initdb", "--pgdata", self.dir / "data",
                        "--username", _ROLE, "--pwfile", password_file, "--auth", "scram-sha-256",
                        "--encoding", "UTF8", "--no-sync", "--no-instructions"],
                       cwd=self.dir, check=True, capture_output=True)  # fmt: skip
        password_file.unlink()
        self.launch()

    def launch(self) -> None:
        """Start the server on the cluster made by `start`, as after `halt`."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self._as_server_account(), "--pdeathsig", "SIGKILL", _bin_dir() / "postgres",
                 "-D", self.dir / "data", "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                 "-c", f"unix_socket_directories={self.dir}", "-c", "synchronous_commit=off"],
                cwd=self.dir, stdout=log, stderr=log,
            )  # fmt: skip
        wait_until(self._accepts, 60, "PostgreSQL to accept connections")

    def create_database(self) -> str:
        """A new, empty database; its URL."""
        name = f"sandboxd_{os.getpid()}_{next(self._databases)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")  # a name of ours
        return self.url(name)

    def stop(self) -> None:
        """Halt the server and remove its directory."""
        try:
            self.halt()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def halt(self) -> None:
        """Stop the server by its pid (a fast shutdown: SIGINT; SIGKILL if it still runs a
        minute later), its cluster kept for `launch`."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def _accepts(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"PostgreSQL exited: {self.log.read_text()[-2000:]}"
        try:
            psycopg.connect(self.url(), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def _as_server_account(self) -> list[str]:
        """setpriv's prefix running a program as the server's account (root's tests), or as
        this one; its directory handed to that account."""
        self._hand_over(self.dir)
        if os.geteuid() != 0:
            return ["setpriv"]
        return ["setpriv", f"--reuid={_SERVER_ACCOUNT}", f"--regid={_SERVER_ACCOUNT}",
                "--clear-groups"]  # fmt: skip

    def _hand_over(self, path: Path) -> None:
        if os.geteuid() == 0:
            account = pwd.getpwnam(_SERVER_ACCOUNT)
            os.chown(path, account.pw_uid, account.pw_gid)
