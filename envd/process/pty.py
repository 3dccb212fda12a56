"""Pseudo-terminals: open one at a size, resize it, and make it the child's controlling tty."""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from typing import Final

# The kernel's winsize fields are 16 bits; the wire sends uint32 (Go truncates the same way).
_SIZE_MASK: Final = 0xFFFF


def set_size(fd: int, cols: int, rows: int) -> None:
    """TIOCSWINSZ on either side of the pty; the foreground process group gets SIGWINCH."""
    winsize = struct.pack("HHHH", rows & _SIZE_MASK, cols & _SIZE_MASK, 0, 0)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, winsize)


def open_pty(cols: int, rows: int) -> tuple[int, int]:
    """A new (master, slave) pair of the given size; the master is non-blocking."""
    master, slave = os.openpty()
    try:
        set_size(master, cols, rows)
        os.set_blocking(master, False)
    except OSError:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


def take_controlling_tty() -> None:
    """In the child, after setsid: the pty on stdin becomes its controlling terminal, so job
    control, SIGINT from ^C and `tty` work as in a terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
