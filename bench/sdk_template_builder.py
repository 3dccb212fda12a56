"""The client half of bench.template_build, run with the SDK suite's virtualenv (tests/sdk/.venv,
which has the `e2b` package; envd's own virtualenv does not).

Reads request lines on stdin and answers each with one line on stdout:

- `build URL API_KEY NAME CONTEXT_DIR DOCKERFILE SKIP_CACHE` → `SECONDS`: the unmodified SDK's
  `Template.build(Template(file_context_path=CONTEXT_DIR).from_dockerfile(DOCKERFILE), NAME,
  skip_cache=SKIP_CACHE == "1")` against the sandboxd at URL, timed to its return;
- `create URL API_KEY NAME` → `SANDBOX_ID TOTAL_SECONDS`: `Sandbox.create(NAME)`, then
  `commands.run("true")`, timed to the command's end.

The SDK polls a build's status every 200 ms; that poll interval is set to 20 ms here, so that a
build's time is the server's and not the poll's rounding (a user's build takes up to 200 ms
longer to be seen as done).
"""

from __future__ import annotations

import os
import sys
import time

from e2b import Sandbox, Template

TIMEOUT_S = 300
POLL_S = 0.02


def build(url: str, api_key: str, name: str, context: str, dockerfile: str, skip: str) -> str:
    template = Template(file_context_path=context).from_dockerfile(dockerfile)
    begin = time.perf_counter()
    Template.build(template, name, skip_cache=skip == "1", api_key=api_key, api_url=url)
    return f"{time.perf_counter() - begin}"


def create(url: str, api_key: str, name: str) -> str:
    begin = time.perf_counter()
    sandbox = Sandbox.create(name, timeout=TIMEOUT_S, api_key=api_key, api_url=url, sandbox_url=url)
    result = sandbox.commands.run("true")
    done = time.perf_counter()
    assert result.exit_code == 0, result
    return f"{sandbox.sandbox_id} {done - begin}"


def main() -> None:
    os.environ.pop("E2B_DEBUG", None)  # normal mode: the control API builds and creates
    Template._logs_refresh_frequency = POLL_S  # see the module docstring
    for line in sys.stdin:
        op, *args = line.split()
        answer = build(*args) if op == "build" else create(*args)
        print(answer, flush=True)


if __name__ == "__main__":
    main()
