"""The client half of bench.sdk_read, run with the SDK suite's virtualenv (tests/sdk/.venv,
which has the `e2b` package; envd's own virtualenv does not).

Reads `URL PATH FORMAT` lines on stdin; for each, times one `Sandbox.files.read(PATH,
format=FORMAT)` by the unmodified SDK against the server at URL (debug mode, reached through the
SDK's `sandbox_url` option) and answers `seconds client_cpu_seconds length sha256` on stdout.
The SDK sends its HTTP client's default `Accept-Encoding: gzip, deflate`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

from e2b import Sandbox


def main() -> None:
    os.environ["E2B_DEBUG"] = "true"  # talk to the server at sandbox_url, no E2B API
    sandboxes: dict[str, Sandbox] = {}
    for line in sys.stdin:
        url, path, read_format = line.split()
        if url not in sandboxes:
            sandboxes[url] = Sandbox.create(sandbox_url=url)
        wall, cpu = time.perf_counter(), time.process_time()
        content = sandboxes[url].files.read(path, format=read_format)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        data = content.encode() if isinstance(content, str) else bytes(content)
        print(f"{wall} {cpu} {len(data)} {hashlib.sha256(data).hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
