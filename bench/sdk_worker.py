"""The e2b Python SDK's side of the peer benchmarks (bench.peers), run by bench.peers with the SDK
suite's own virtualenv (tests/sdk/.venv: the SDK pins an older Connect runtime than envd's), in
debug mode and pointed at the bench's envd through `sandbox_url`. Standard library and e2b only.

    python bench/sdk_worker.py write_loop|write_files URL DIR COUNT SIZE
    python bench/sdk_worker.py run URL COUNT

Each does one untimed warm-up call on the kept-alive connection, then prints one JSON line:
the timed seconds, the worker's own CPU seconds and, for `run`, each call's seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time

from e2b import Sandbox


def write_loop(sandbox: Sandbox, directory: str, count: int, data: bytes) -> None:
    for i in range(count):
        sandbox.files.write(f"{directory}/loop-{i}", data)


def write_files(sandbox: Sandbox, directory: str, count: int, data: bytes) -> None:
    sandbox.files.write_files(
        [{"path": f"{directory}/batch-{i}", "data": data} for i in range(count)]
    )


def main() -> None:
    operation, url = sys.argv[1], sys.argv[2]
    os.environ["E2B_DEBUG"] = "true"  # no E2B API: straight to envd at `url`
    sandbox = Sandbox.create(sandbox_url=url)
    samples: list[float] = []
    if operation == "run":
        count = int(sys.argv[3])
        sandbox.commands.run("echo x")
        cpu, started = time.process_time(), time.perf_counter()
        for _ in range(count):
            call = time.perf_counter()
            result = sandbox.commands.run("echo x")
            samples.append(time.perf_counter() - call)
            assert result.stdout == "x\n", result
    else:
        directory, count, size = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        data = os.urandom(size)
        sandbox.files.write(f"{directory}/warm-up", data)
        writer = {"write_loop": write_loop, "write_files": write_files}[operation]
        cpu, started = time.process_time(), time.perf_counter()
        writer(sandbox, directory, count, data)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "cpu": time.process_time() - cpu, "samples": samples}))


if __name__ == "__main__":
    main()
