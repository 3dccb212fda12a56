"""The e2b SDK's side of a benchmark: a worker script under bench/ run with the SDK suite's own
virtualenv (tests/sdk/.venv, built by scripts/sdk-env: the SDK pins an older Connect runtime
than envd's), answering one request line with one line of space-separated fields."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SDK_PYTHON = REPO / "tests" / "sdk" / ".venv" / "bin" / "python"


def require_sdk_python() -> None:
    if not SDK_PYTHON.exists():
        raise SystemExit(f"{SDK_PYTHON} is missing: build it with scripts/sdk-env")


class SdkProcess:
    """bench/`script` in the SDK's virtualenv, kept running for many requests. Variables
    starting with E2B_ are not passed on: each worker points the SDK where its requests say."""

    def __init__(self, script: str, prefix: tuple[str, ...] = ()) -> None:
        """`prefix`: what runs the worker (e.g. nsenter into a network namespace)."""
        require_sdk_python()
        env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
        self.script = script
        self.proc = subprocess.Popen(
            [*prefix, str(SDK_PYTHON), str(REPO / "bench" / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, *fields: object) -> list[str]:
        """Send one request line; return the answer line's fields."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(" ".join(map(str, fields)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"bench/{self.script} exited")
        return line.split()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
