"""Start a child as the reference envd does: a fresh environment, the user's credentials, the cwd
entered as that user, OOM/nice/IO priority reset, and pipes or a pty for its I/O.

The reference (Go `process/handler.go`) runs every command through
`/bin/sh -c 'echo 100 > /proc/$$/oom_score_adj && exec ionice -c 2 -n 4 nice -n D "$@"' -- cmd`.
We do the same three resets between fork and exec, which saves the three extra execs while
leaving the child in the same state: oom_score_adj 100, IO class best-effort 4, nice 0. They are
done by the spawn helper (spawn_helper.py) when there is one, else by Python in a forked child.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from envd.libc import errno_error, libc
from envd.process.pty import open_pty, take_controlling_tty

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from envd.users import User

# What a user's process gets; envd itself runs at -1000 in production so the OOM killer spares it.
OOM_SCORE_ADJ: Final = b"100"
STDOUT_PIPE_BYTES: Final = 1024 * 1024  # Linux default pipe-max-size
_IOPRIO_WHO_PROCESS: Final = 1
_IOPRIO_BEST_EFFORT_4: Final = (2 << 13) | 4
_SYS_IOPRIO_SET: Final = {"x86_64": 251, "aarch64": 30}.get(platform.machine())
# How much of a child's "step: reason" report (written between fork and exec) is read.
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


def _widen(pipe_fd: int) -> None:
    """A larger stdout pipe lets a fast child run ahead of envd's reads; the chunks read meanwhile
    then leave as one event (streams.py), instead of one small event per pipe-full. Pages are
    only used while data is waiting."""
    with contextlib.suppress(OSError):  # over the system's pipe-max-size: keep the default
        fcntl.fcntl(pipe_fd, fcntl.F_SETPIPE_SZ, STDOUT_PIPE_BYTES)


def _own_group(req: SpawnRequest) -> dict[str, Any]:
    """Every child leads its own process group, so signals reach its whole tree (the reference
    leaves non-PTY children in envd's group). A PTY child needs a session of its own for its
    controlling terminal; others get only a group: with the scheduler's autogroups a new session
    is a new CPU group, which measured 4 ms slower per `bash -l` start on a busy machine."""
    if req.pty_size is not None:
        return {"start_new_session": True}
    return {"process_group": 0}


def _set_io_best_effort() -> None:
    if _SYS_IOPRIO_SET is None:
        return
    if libc.syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, 0, _IOPRIO_BEST_EFFORT_4) != 0:
        raise errno_error()


def _child_setup(req: SpawnRequest, report_fd: int) -> Callable[[], None]:
    """Runs in the forked child, after setsid/setpgid and the stdio dup2s, before exec.

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
            **_own_group(req),
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


async def spawn(req: SpawnRequest, helper: str | None) -> Child:
    """Start the child, through the spawn helper when there is one. Returned fds are ours
    and non-blocking.

    Raises:
        SpawnError: the child could not be started.
    """
    if req.pty_size is not None:
        return await _spawn_pty(req, helper, *req.pty_size)
    parent_fds: list[int] = []
    child_fds: list[int] = []
    try:
        if req.stdin:
            stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
            parent_fds.append(stdin_w)
            child_fds.append(stdin_r)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        _widen(out_r)
        parent_fds += [out_r, err_r]
        child_fds += [out_w, err_w]
        stdin_fd = stdin_r if req.stdin else subprocess.DEVNULL
        popen = await _launch(req, helper, (stdin_fd, out_w, err_w))
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


async def _spawn_pty(req: SpawnRequest, helper: str | None, cols: int, rows: int) -> Child:
    try:
        master, slave = open_pty(cols, rows)
    except OSError as exc:
        raise SpawnError(f"open pty: {exc.strerror}") from None
    try:
        popen = await _launch(req, helper, (slave, slave, slave))
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return Child(popen, None, None, None, master)


async def _launch(
    req: SpawnRequest, helper: str | None, stdio: tuple[int, int, int]
) -> subprocess.Popen[bytes]:
    if helper is None:
        return _start(req, stdio)
    switch_user = os.geteuid() == 0
    user = req.user
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            # vfork + exec: returns in about a millisecond, less than a thread hop would cost.
            popen = subprocess.Popen(  # noqa: ASYNC220
                [
                    helper,
                    str(report_w),
                    str(user.uid) if switch_user else "-",
                    str(user.gid) if switch_user else "-",
                    ",".join(map(str, user.groups)) if switch_user else "-",
                    req.cwd,
                    "1" if req.pty_size is not None else "0",
                    req.cmd,
                    *req.args,
                ],
                stdin=stdio[0],
                stdout=stdio[1],
                stderr=stdio[2],
                env=req.env,
                **_own_group(req),
                pass_fds=(report_w,),
            )
        finally:
            os.close(report_w)
        try:
            reason = await _read_report(report_r)
        except BaseException:  # cancelled while the helper ran: leave no orphan behind
            popen.kill()
            popen.wait()
            raise
    except (OSError, ValueError) as exc:  # fork failure, NUL bytes, '=' in an env name
        raise SpawnError(str(exc)) from None
    finally:
        os.close(report_r)
    if reason:
        popen.wait()  # it exits right after reporting
        raise SpawnError(reason)
    return popen


async def _read_report(fd: int) -> str:
    """What the helper reported before exec'ing the command: empty means it exec'd (the
    pipe is close-on-exec)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    report = b""
    while True:
        try:
            data = os.read(fd, _REPORT_LIMIT_BYTES)
        except BlockingIOError:
            readable = loop.create_future()
            loop.add_reader(fd, readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(fd)
            continue
        if not data:
            return report.decode(errors="replace")
        report += data


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
