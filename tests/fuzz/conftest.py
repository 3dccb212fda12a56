"""The fuzz run's fixture: one sandboxed, unprivileged envd for the session (sandbox.py), and
`fuzz.run(requests)`, which plays one example's requests against a freshly reset sandbox and
fails on the first bad answer, dead daemon or alarming log line."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from typing import TYPE_CHECKING

import httpx
import pytest
from hypothesis import assume, event, note

from tests.envd_process import TRACEBACK_MARKER
from tests.fuzz.checks import REQUEST_TIMEOUT_S, DaemonWatch, send, verdict
from tests.fuzz.safety import Confinement
from tests.fuzz.sandbox import throwaway_sandbox

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from tests.envd_process import EnvdProcess
    from tests.fuzz.safety import FuzzRequest
    from tests.fuzz.sandbox import Sandbox


class FuzzRun:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.conf = Confinement(sandbox)
        self.client = httpx.Client()
        self.watch = DaemonWatch()
        self._failing = False  # the example under way (or the last one) has failed

    def run(self, requests: Sequence[FuzzRequest]) -> None:
        for request in requests:
            problem = self.conf.problem(request)
            if problem is not None:
                event(f"refused by the safety gate: {problem}"[:80])
            assume(problem is None)
        self._check_between_examples()
        self._reset()
        self._failing = True
        daemon = self.sandbox.running()
        for number, request in enumerate(requests, 1):
            problems = self._play(daemon, number, request)
            assert not problems, f"request {number} of {len(requests)}: " + "\n".join(problems)
        dead = self._still_serving(daemon)
        assert dead is None, f"after the last request: {dead}"
        self._failing = False

    def _play(self, daemon: EnvdProcess, number: int, request: FuzzRequest) -> list[str]:
        outcome = send(self.client, daemon.url, request)
        if outcome.error is not None:  # a crash is in progress, perhaps: let it finish
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.proc.wait(timeout=1)
        note(f"request {number}: {request!r}\n -> {outcome.status} {outcome.body[:300]!r}")
        if outcome.status >= 500:  # mapped ones pass, but they are worth a look
            event(f"HTTP {outcome.status}: {outcome.body[:60]!r}")
        # Both, always: the log must be read up to here even when the answer already fails.
        return [p for p in (verdict(outcome), self.watch.problem(daemon)) if p]

    def _check_between_examples(self) -> None:
        """Whatever the daemon logged since the last example ended: that example's fault,
        unless it failed already (then it was reported, and this only catches up)."""
        if self.sandbox.daemon is not None:
            late = self.watch.problem(self.sandbox.daemon)
            assert self._failing or late is None, f"after the previous example passed: {late}"

    def _still_serving(self, daemon: EnvdProcess) -> str | None:
        """A daemon that crashes while handling a request may do so just after answering (or
        after the client stopped reading): ask it once more before calling the example good."""
        try:
            self.client.get(daemon.url + "/health", timeout=REQUEST_TIMEOUT_S)
        except httpx.TransportError as exc:
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.proc.wait(timeout=2)
            return self.watch.problem(daemon) or f"/health failed: {exc!r}"
        return self.watch.problem(daemon)

    def _reset(self) -> None:
        """Empty home/ and scratch/ and restore the daemon's /init state, so each example
        starts alike (and a failing one replays alike while it is shrunk)."""
        for d in (self.sandbox.home, self.sandbox.scratch):
            shutil.rmtree(d, ignore_errors=True)
        self.sandbox.restore_dirs()
        self.sandbox.kill_children()
        self.sandbox.reset_state(self.client)


@pytest.fixture(scope="session")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzRun]:
    with throwaway_sandbox(tmp_path_factory.mktemp("envd-fuzz-logs")) as sandbox:
        run = FuzzRun(sandbox)
        try:
            yield run
        finally:
            run.client.close()
    for daemon in sandbox.daemons:
        logs = daemon.logs()
        assert TRACEBACK_MARKER not in logs, f"envd logged a traceback:\n{logs}"
