"""ProcessHandle: one running child — its output pumps, exit watcher, input, resize and signals.

End of a process: the reference (Go `handler.go`) sends the end event only after the child was
reaped AND every output pipe reached EOF, so a background grandchild holding stdout open delays
the end event until it exits. We wait for EOF at most EOF_GRACE_S after
the child was reaped: everything the child itself wrote is already in the pipe by then and is
delivered first; a grandchild's later output is read and discarded until its EOF.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Final, Literal

from envd._gen.process.process_pb import ProcessEvent
from envd.process.broadcast import Broadcast
from envd.process.pty import set_size
from envd.process.spawn import close_quietly

if TYPE_CHECKING:
    from collections.abc import Callable

    from envd._gen.process.process_pb import ProcessConfig
    from envd.process.spawn import Child

log = logging.getLogger("envd.process")

PIPE_CHUNK_BYTES: Final = 32 * 1024  # Go: stdout/stderr reads
PTY_CHUNK_BYTES: Final = 16 * 1024  # Go: pty reads
EOF_GRACE_S: Final = 0.25
# envd runs at nice -20 and its children at 0 (packaging/envd.service, the spawn helper), as the
# reference does. On a shared core every write of a streaming child then wakes envd, which
# preempts the child at once and reads just that write (8 KiB for `head -c`): four times the
# events per MiB, twice envd's CPU and half the throughput. A short read that comes within
# STREAMING_GAP_S of the previous one means output is streaming in small pieces: envd gives its
# core back once (sched_yield) so the child can fill the pipe before the next read. A lone
# short read (a prompt, a log line) is published at once.
STREAMING_GAP_S: Final = 0.001

OutputKind = Literal["stdout", "stderr", "pty"]


class ProcessOperationError(Exception):
    """Input, a resize or a signal could not reach the running child."""


class InputClosedError(ProcessOperationError):
    """Input for a stream (stdin or the tty) that is closed, or was never opened."""


class NotAPtyError(ProcessOperationError):
    """A tty operation (tty input, resize) on a process started without a pty."""

    def __init__(self, action: str) -> None:
        super().__init__(f"{action}: tty not assigned to process")


class PtyClosedError(ProcessOperationError):
    """A resize after the process's pty was closed (it has exited)."""


class PtyHasNoStdinError(Exception):
    """CloseStdin on a pty process: its input is the terminal, which cannot be half-closed."""


Chunk = tuple[OutputKind, bytes]

# Go's syscall.Signal.String() for the signals a process commonly dies of.
_SIGNAL_TEXT: Final = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction",
    signal.SIGTRAP: "trace/breakpoint trap",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGXFSZ: "file size limit exceeded",
}


def end_event(status: int) -> ProcessEvent.EndEvent:
    """Go's ProcessState: exit_code -1 when signalled; error absent only on exit 0."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        text = "signal: " + _SIGNAL_TEXT.get(signal.Signals(number), f"signal {number}")
        if os.WCOREDUMP(status):
            text += " (core dumped)"
        return ProcessEvent.EndEvent(exit_code=-1, exited=False, status=text, error=text)
    code = os.waitstatus_to_exitcode(status)
    text = f"exit status {code}"
    return ProcessEvent.EndEvent(
        exit_code=code, exited=True, status=text, error=text if code else None
    )


def _outputs(child: Child) -> list[tuple[int, OutputKind, int]]:
    if child.pty is not None:
        return [(child.pty, "pty", PTY_CHUNK_BYTES)]
    pipes: list[tuple[int | None, OutputKind]] = [
        (child.stdout, "stdout"),
        (child.stderr, "stderr"),
    ]
    return [(fd, kind, PIPE_CHUNK_BYTES) for fd, kind in pipes if fd is not None]


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class ProcessHandle:
    def __init__(self, child: Child, config: ProcessConfig, tag: str | None) -> None:
        self.child = child
        self.pid = child.pid
        self.config = config
        self.tag = tag
        self.is_pty = child.pty is not None
        self.output: Broadcast[Chunk] = Broadcast()
        self.end: asyncio.Future[ProcessEvent.EndEvent] = asyncio.get_running_loop().create_future()
        self._loop = asyncio.get_running_loop()
        self._status: int | None = None
        self._eof_deadline = 0.0
        self._waiters: set[asyncio.Future[None]] = set()
        self._stdin = child.stdin
        self._pty = child.pty
        self._input_lock = asyncio.Lock()
        self._pidfd = os.pidfd_open(self.pid)
        self._loop.add_reader(self._pidfd, self._reap)
        self._kill_timer: asyncio.TimerHandle | None = None

    def kill_after(self, seconds: float) -> None:
        """Connect-Timeout-Ms: SIGKILL the group at the deadline, whoever is attached."""
        self._kill_timer = self._loop.call_later(seconds, self.kill_quietly, signal.SIGKILL)

    async def run(self, on_end: Callable[[ProcessHandle], None]) -> None:
        """Pump output until EOF (or the grace after exit), then publish the end event."""
        pumps = _outputs(self.child)
        released = [self._loop.create_future() for _ in pumps]
        tasks = [
            asyncio.create_task(self._pump(fd, kind, size, done))
            for (fd, kind, size), done in zip(pumps, released, strict=True)
        ]
        try:
            await asyncio.gather(*released)
            status = await self._exited()
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            if self._status is None:
                self._loop.remove_reader(self._pidfd)
                os.close(self._pidfd)
            raise
        finally:
            self.output.close()
            self._close_input()
        self.end.set_result(end_event(status))
        on_end(self)
        # Pumps still draining a grandchild's output finish on their own at its EOF.
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _exited(self) -> int:
        while self._status is None:
            await self._wait(None)
        return self._status

    def _reap(self) -> None:
        self._loop.remove_reader(self._pidfd)
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0  # reaped elsewhere: nothing better to report
        if pid == 0:  # not yet: a spurious wakeup
            self._loop.add_reader(self._pidfd, self._reap)
            return
        os.close(self._pidfd)
        self._status = status
        self.child.popen.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap it
        self._eof_deadline = self._loop.time() + EOF_GRACE_S
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        for waiter in list(self._waiters):
            _wake(waiter)

    async def _wait(self, fd: int | None) -> None:
        """Until `fd` is readable, the child exits, or (after the exit) the EOF grace ends."""
        waiter = self._loop.create_future()
        self._waiters.add(waiter)
        if fd is not None:
            self._loop.add_reader(fd, _wake, waiter)
        timer = None
        if self._status is not None and fd is not None:
            timer = self._loop.call_later(
                max(0.0, self._eof_deadline - self._loop.time()), _wake, waiter
            )
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)
            if fd is not None:
                self._loop.remove_reader(fd)
            if timer is not None:
                timer.cancel()

    async def _pump(
        self, fd: int, kind: OutputKind, size: int, released: asyncio.Future[None]
    ) -> None:
        last_read = 0.0
        try:
            while True:
                try:
                    data = os.read(fd, size)
                except BlockingIOError:
                    if released.done():
                        await self._wait_discarding(fd)
                        continue
                    if self._status is not None and self._loop.time() >= self._eof_deadline:
                        _wake(released)
                        continue
                    await self._wait(fd)
                    continue
                except OSError as exc:
                    if exc.errno != errno.EIO:  # EIO: the pty's slave side is closed = EOF
                        log.warning("reading %s of pid %d: %s", kind, self.pid, exc)
                    data = b""
                if not data:
                    return
                now = time.monotonic()
                if len(data) < size and now - last_read < STREAMING_GAP_S:
                    os.sched_yield()
                last_read = now
                if not released.done():
                    await self.output.publish((kind, data))
        finally:
            _wake(released)
            if fd == self._pty:
                self._pty = None
            close_quietly(fd)

    async def _wait_discarding(self, fd: int) -> None:
        waiter = self._loop.create_future()
        self._loop.add_reader(fd, _wake, waiter)
        try:
            await waiter
        finally:
            self._loop.remove_reader(fd)

    # Input. Messages and codes are the reference's (Go `handler.go`, `input.go`).

    async def write_stdin(self, data: bytes) -> None:
        if self.is_pty or self._stdin is None:
            raise InputClosedError("error writing to stdin: stdin not enabled or closed")
        await self._write("stdin", data)

    async def write_pty(self, data: bytes) -> None:
        if not self.is_pty:
            raise NotAPtyError("error writing to tty")
        await self._write("tty", data)

    async def _write(self, what: Literal["stdin", "tty"], data: bytes) -> None:
        view = memoryview(data)
        async with self._input_lock:
            while view:
                # Re-read after every wait: the fd is closed (and its number reusable) at exit.
                fd = self._stdin if what == "stdin" else self._pty
                if fd is None:
                    raise InputClosedError(f"error writing to {what}: closed")
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await self._wait_writable(fd)
                except OSError as exc:
                    raise ProcessOperationError(
                        f"error writing to {what}: {exc.strerror}"
                    ) from None

    async def _wait_writable(self, fd: int) -> None:
        waiter = self._loop.create_future()
        self._waiters.add(waiter)  # CloseStdin / exit wake us too
        self._loop.add_writer(fd, _wake, waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)
            self._loop.remove_writer(fd)

    def close_stdin(self) -> None:
        if self.is_pty:
            raise PtyHasNoStdinError(
                "error closing stdin: cannot close stdin for PTY process — send Ctrl+D (0x04) instead"
            )
        self._close_input()

    def _close_input(self) -> None:
        fd, self._stdin = self._stdin, None
        if fd is not None:
            for waiter in list(self._waiters):
                _wake(waiter)
            self._loop.remove_writer(fd)
            close_quietly(fd)

    def resize(self, cols: int, rows: int) -> None:
        if not self.is_pty:
            raise NotAPtyError("error resizing tty")
        if self._pty is None:
            raise PtyClosedError("error resizing tty: closed")
        try:
            set_size(self._pty, cols, rows)
        except OSError as exc:
            raise ProcessOperationError(f"error resizing tty: {exc.strerror}") from None

    def send_signal(self, sig: signal.Signals) -> None:
        """To the whole process group (the reference signals only the pid; the group reaches
        `bash -c "sleep 30 && echo done"`'s sleep too)."""
        try:
            os.killpg(self.pid, sig)
        except OSError as exc:
            raise ProcessOperationError(f"error sending signal: {exc.strerror}") from None

    def kill_quietly(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except OSError as exc:
            log.warning("cannot signal process group %d: %s", self.pid, exc)
