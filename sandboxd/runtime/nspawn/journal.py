"""A sandbox's log lines: its own journal (systemd's boot and every unit's output, envd's
included), read from the host with journalctl over the journal files inside the sandbox
(`/run/log/journal` of its mount namespace, through /proc/LEADER/root: no command runs in the
sandbox, and a paused one can be read too). The journal is volatile and capped at 8 MiB
(sandboxd/builds/base_image.py), so a read takes milliseconds.

Everything below the sandbox's root is the sandbox's to make, links included, and a path
crossing /proc/LEADER/root is not a chroot: an absolute link there resolves against the host,
where sandboxd reads as root. So no path inside the sandbox is ever handed to anything that
resolves it: `run/log/journal` is opened from the root's fd with openat2 refusing every link,
each machine-id directory and journal file one name at a time without following a link, only
directories and regular files are kept, and journalctl gets the open files (links of a
directory of sandboxd's own to `/proc/self/fd/N`, its own inherited fds), never a name inside
the sandbox to look up. The read is bounded: caps
on the names looked at and on the files, at most `limit` entries (journalctl is stopped once
it has written them), a cap on each line and a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
from typing import TYPE_CHECKING

from sandboxd.errors import HostError, SandboxError
from sandboxd.host import libc
from sandboxd.runtime.engine import LogEntry

if TYPE_CHECKING:
    from sandboxd.runtime.nspawn.box import NspawnBox

# syslog priorities as E2B's log levels
LEVELS = {0: "error", 1: "error", 2: "error", 3: "error", 4: "warn", 5: "info", 6: "info",
          7: "debug"}  # fmt: skip
# envd writes `logger=NAME message` (envd/logs.py)
_ENVD_LOGGER = re.compile(r"^logger=(\S+) ")

JOURNALS = "run/log/journal"
# journald keeps a few files per machine id (the active one, rotated ones, a user's): more is
# something the sandbox made, and only the most recently written are read.
MAX_FILES = 32
# Names looked at in each directory (read lazily): a sandbox's million of them costs no more.
MAX_NAMES = 256
# journalctl's json output shows a field over 4096 bytes as null (without --all) and we ask for
# three fields, so a real entry's line is a few KiB; a longer one is refused, not buffered.
MAX_LINE = 64 << 10
TIMEOUT_S = 10
_NO_LINKS = libc.RESOLVE_IN_ROOT | libc.RESOLVE_NO_SYMLINKS | libc.RESOLVE_NO_MAGICLINKS
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


async def read(box: NspawnBox, since_us: int | None, until_us: int | None, limit: int,
               newest_first: bool) -> list[LogEntry]:  # fmt: skip
    """At most `limit` entries in [since_us, until_us], oldest first, or newest first.

    Raises:
        HostError: journalctl is missing.
        SandboxError: the sandbox is gone or its journal cannot be read in time.
    """
    if shutil.which("journalctl") is None:
        raise HostError("journalctl is missing (scripts/install installs systemd)")
    # Opening walks the sandbox's tree: a thread, not the event loop.
    files = await asyncio.to_thread(_journal_files, box)
    try:
        if not files or limit == 0:
            return []
        with tempfile.TemporaryDirectory(prefix="sandboxd-journal-") as listing:
            # journalctl's --file fails the whole read on one file it cannot open; --directory
            # skips that file. The directory is ours: each entry a link to an fd journalctl
            # inherits, /proc/self being journalctl's own.
            for fd in files:
                os.symlink(f"/proc/self/fd/{fd}", os.path.join(listing, f"{fd}.journal"))
            return await _run(box, _argv(listing, since_us, until_us, limit, newest_first),
                              files, limit)  # fmt: skip
    finally:
        for fd in files:
            os.close(fd)


def _argv(listing: str, since_us: int | None, until_us: int | None, limit: int,
          newest_first: bool) -> list[str]:  # fmt: skip
    argv = ["journalctl", "--directory", listing, "--output", "json", "--no-pager", "--quiet",
            "--output-fields", "MESSAGE,PRIORITY,SYSLOG_IDENTIFIER"]  # fmt: skip
    if since_us is not None:
        argv += ["--since", f"@{since_us / 1e6:.6f}"]
    if until_us is not None:
        argv += ["--until", f"@{until_us / 1e6:.6f}"]
    if newest_first:  # journalctl reads from the end itself
        argv += ["--reverse", "--lines", str(limit)]
    return argv


def _journal_files(box: NspawnBox) -> list[int]:
    """O_PATH fds of the sandbox's journal files (regular files named *.journal or *.journal~
    in a directory of its `/run/log/journal`), the MAX_FILES most recently written."""
    try:
        root = os.open(f"/proc/{box.leader_pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(f"sandbox {box.id}: no root to read ({exc.strerror})") from exc
    try:
        journals = libc.openat2(root, JOURNALS, _DIR, _NO_LINKS)
    except OSError as exc:
        raise SandboxError(f"sandbox {box.id}: no journal to read ({exc.strerror})") from exc
    finally:
        os.close(root)
    found: list[tuple[float, int]] = []
    try:
        for name in _names(journals):
            found += _files_in(journals, name)
    except OSError as exc:
        for _, fd in found:
            os.close(fd)
        raise SandboxError(f"sandbox {box.id}: its journal cannot be listed ({exc})") from exc
    finally:
        os.close(journals)
    found.sort(reverse=True)
    for _, fd in found[MAX_FILES:]:
        os.close(fd)
    return [fd for _, fd in found[:MAX_FILES]]


def _files_in(journals: int, name: str) -> list[tuple[float, int]]:
    """(mtime, O_PATH fd) of each journal file in the directory `name`; none if `name` is not
    a directory (a link to one included)."""
    try:
        directory = libc.openat2(journals, name, _DIR, _NO_LINKS)
    except OSError:  # a link, a file, or gone meanwhile
        return []
    found: list[tuple[float, int]] = []
    try:
        for entry in _names(directory):
            if not entry.endswith((".journal", ".journal~")):
                continue
            try:
                fd = libc.openat2(directory, entry, os.O_PATH | os.O_NOFOLLOW, _NO_LINKS)
            except OSError:  # gone meanwhile
                continue
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):  # not a link (O_PATH opened the link itself)
                found.append((st.st_mtime, fd))
            else:
                os.close(fd)
    except OSError:
        for _, fd in found:
            os.close(fd)
        raise
    finally:
        os.close(directory)
    return found


def _names(directory: int) -> list[str]:
    """The first MAX_NAMES names in `directory`."""
    with os.scandir(directory) as entries:
        return [entry.name for entry in itertools.islice(entries, MAX_NAMES)]


async def _run(box: NspawnBox, argv: list[str], files: list[int], limit: int) -> list[LogEntry]:
    """The first `limit` entries journalctl writes; it is stopped once it has written them."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, pass_fds=files, limit=MAX_LINE,
    )  # fmt: skip
    assert proc.stdout is not None  # noqa: S101  # a pipe was asked for
    assert proc.stderr is not None  # noqa: S101
    entries: list[LogEntry] = []
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while len(entries) < limit and (line := await proc.stdout.readline()):
                entries.append(_entry(json.loads(line)))
            if len(entries) < limit:  # all written: journalctl's verdict counts
                error = (await proc.stderr.read(4096)).decode(errors="replace").strip()
                if await proc.wait() != 0:
                    raise SandboxError(f"sandbox {box.id}: journalctl: {error[:200]}")
    except TimeoutError as exc:
        raise SandboxError(f"sandbox {box.id}: its journal took over {TIMEOUT_S} s") from exc
    except ValueError as exc:  # a line over MAX_LINE, or not json
        raise SandboxError(f"sandbox {box.id}: its journal has an unreadable entry") from exc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return entries


def _entry(record: dict[str, object]) -> LogEntry:
    message = record.get("MESSAGE", "")
    if isinstance(message, list):  # binary data: journalctl gives the bytes
        message = bytes(message).decode(errors="replace")
    message = str(message)
    logger = str(record.get("SYSLOG_IDENTIFIER", ""))
    if found := _ENVD_LOGGER.match(message):
        logger, message = found.group(1), message[found.end() :]
    priority = str(record.get("PRIORITY", "6"))
    level = LEVELS.get(int(priority), "info") if priority.isdigit() else "info"
    return LogEntry(int(str(record["__REALTIME_TIMESTAMP"])), level, logger, message)
