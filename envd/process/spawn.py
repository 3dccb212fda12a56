"""Start a child as the reference envd does: a fresh environment, the user's credentials, the cwd
entered as that user, OOM/nice/IO priority reset, and pipes or a pty for its I/O.

The reference (Go `process/handler.go`) runs every command through
`/bin/sh -c 'echo 100 > /proc/$$/oom_score_adj && exec ionice -c 2 -n 4 nice -n D "$@"' -- cmd`.
We do the same three resets in the forked child before exec, which saves the three extra execs
while leaving the child in the same state: oom_score_adj 100, IO class best-effort 4, nice 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from envd.process.pty import open_pty, take_controlling_tty

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from envd.users import User

# What a user's process gets; envd itself runs at -1000 in production so the OOM killer spares it.
OOM_SCORE_ADJ: Final = b"100"
_IOPRIO_WHO_PROCESS: Final = 1
_IOPRIO_BEST_EFFORT_4: Final = (2 << 13) | 4
_SYS_IOPRIO_SET: Final = {"x86_64": 251, "aarch64": 30}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
# Only the parent ever fails before the child exists; everything after fork is reported here.
_REPORT_LIMIT_BYTES: Final = 512


class SpawnError(Exception):
    """The child could not be started (credentials, cwd, fork, exec of the fallback shell)."""


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    cmd: str
    args: list[str]
    env: dict[str, str]
    cwd: str
    user: User
    pty_size: tuple[int, int] | None  # (cols, rows)
    stdin: bool


@dataclass(slots=True)
class Child:
    popen: subprocess.Popen[bytes]
    stdin: int | None  # our end of the stdin pipe; None with /dev/null or a pty
    stdout: int | None
    stderr: int | None
    pty: int | None  # the master side

    @property
    def pid(self) -> int:
        return self.popen.pid


def child_env(user: User, store: Mapping[str, str], requested: Mapping[str, str]) -> dict[str, str]:
    """Built from scratch as in Go: nothing of envd's own environment leaks except PATH
    (no NOTIFY_SOCKET, VIRTUAL_ENV, INVOCATION_ID, ...). Later entries win."""
    env = {
        "PATH": os.environ.get(
            "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        ),
        "HOME": user.home,
        "USER": user.name,
        "LOGNAME": user.name,
    }
    env.update(store)
    env.update(requested)
    return env


def _set_io_best_effort() -> None:
    if _SYS_IOPRIO_SET is None:
        return
    if _libc.syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, 0, _IOPRIO_BEST_EFFORT_4) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _child_setup(req: SpawnRequest, report_fd: int) -> Callable[[], None]:
    """Runs in the forked child, after setsid and the stdio dup2s, before exec.

    The cwd is entered only after dropping privileges, as Go does, so a directory the user may
    not enter fails the start instead of being entered as root.
    """
    user = req.user
    switch_user = os.geteuid() == 0

    def setup() -> None:
        step = "oom_score_adj"
        try:
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            try:
                os.write(fd, OOM_SCORE_ADJ)
            finally:
                os.close(fd)
            step = "setpriority"
            os.setpriority(os.PRIO_PROCESS, 0, 0)
            step = "ioprio_set"
            _set_io_best_effort()
            if req.pty_size is not None:
                step = "controlling tty"
                take_controlling_tty()
            if switch_user:
                step = "credentials"
                os.setgroups(list(user.groups))
                os.setresgid(user.gid, user.gid, user.gid)
                os.setresuid(user.uid, user.uid, user.uid)
            step = f"chdir {req.cwd}"
            os.chdir(req.cwd)
        except OSError as exc:
            os.write(report_fd, f"{step}: {(exc.strerror or str(exc)).lower()}".encode())
            raise

    return setup


def _popen(
    argv: list[str], req: SpawnRequest, stdio: tuple[int, int, int]
) -> subprocess.Popen[bytes]:
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        return subprocess.Popen(
            argv,
            stdin=stdio[0],
            stdout=stdio[1],
            stderr=stdio[2],
            env=req.env,
            start_new_session=True,  # its own group: signals reach the whole tree
            preexec_fn=_child_setup(req, report_w),  # noqa: PLW1509  # takes no locks, imports nothing
        )
    except subprocess.SubprocessError:
        os.close(report_w)
        report_w = -1
        reason = os.read(report_r, _REPORT_LIMIT_BYTES).decode(errors="replace")
        raise SpawnError(reason or "child setup failed") from None
    finally:
        os.close(report_r)
        if report_w >= 0:
            os.close(report_w)


def _start(req: SpawnRequest, stdio: tuple[int, int, int]) -> subprocess.Popen[bytes]:
    argv = [req.cmd, *req.args]
    try:
        return _popen(argv, req, stdio)
    except (FileNotFoundError, PermissionError, NotADirectoryError):
        # A command that cannot be exec'd is not an RPC error in the reference: its shell
        # wrapper prints the error and exits 127 (or 126). Run that same shell, only now.
        return _popen(["/bin/sh", "-c", 'exec "$@"', "--", *argv], req, stdio)
    except (OSError, ValueError) as exc:  # fork failure, NUL bytes, '=' in an env name
        raise SpawnError(str(exc)) from None


def spawn(req: SpawnRequest) -> Child:
    """Start the child. Returned fds are ours and non-blocking.

    Raises:
        SpawnError: the child could not be started.
    """
    if req.pty_size is not None:
        return _spawn_pty(req, *req.pty_size)
    parent_fds: list[int] = []
    child_fds: list[int] = []
    try:
        if req.stdin:
            stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
            parent_fds.append(stdin_w)
            child_fds.append(stdin_r)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        parent_fds += [out_r, err_r]
        child_fds += [out_w, err_w]
        stdin_fd = stdin_r if req.stdin else subprocess.DEVNULL
        popen = _start(req, (stdin_fd, out_w, err_w))
    except BaseException:
        for fd in parent_fds:
            os.close(fd)
        raise
    finally:
        for fd in child_fds:
            os.close(fd)
    for fd in parent_fds:
        os.set_blocking(fd, False)
    return Child(popen, stdin_w if req.stdin else None, out_r, err_r, None)


def _spawn_pty(req: SpawnRequest, cols: int, rows: int) -> Child:
    try:
        master, slave = open_pty(cols, rows)
    except OSError as exc:
        raise SpawnError(f"open pty: {exc.strerror}") from None
    try:
        popen = _start(req, (slave, slave, slave))
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return Child(popen, None, None, None, master)


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
