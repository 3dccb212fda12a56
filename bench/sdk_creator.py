"""The client half of bench.sandboxd_lifecycle, run with the SDK suite's virtualenv
(tests/sdk/.venv, which has the `e2b` package; envd's own virtualenv does not).

Reads `URL API_KEY` lines on stdin; for each, times the unmodified SDK in normal mode against the
sandboxd at URL (its control API as `api_url`, its proxy as `sandbox_url`): `Sandbox.create()`
(the `base` template, secure as by default) and then `commands.run("true")`, and answers
`SANDBOX_ID CREATE_SECONDS TOTAL_SECONDS` on stdout (total: create → the command's end).
"""

from __future__ import annotations

import os
import sys
import time

from e2b import Sandbox

TIMEOUT_S = 300


def main() -> None:
    os.environ.pop("E2B_DEBUG", None)  # normal mode: the control API creates the sandbox
    for line in sys.stdin:
        url, api_key = line.split()
        begin = time.perf_counter()
        sandbox = Sandbox.create(timeout=TIMEOUT_S, api_key=api_key, api_url=url, sandbox_url=url)
        created = time.perf_counter()
        result = sandbox.commands.run("true")
        done = time.perf_counter()
        assert result.exit_code == 0, result
        print(f"{sandbox.sandbox_id} {created - begin} {done - begin}", flush=True)


if __name__ == "__main__":
    main()
