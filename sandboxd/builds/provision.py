"""The provisioning layer every pulled image gets: what the E2B SDKs assume of a sandbox that
the image may lack (E2B's builder installs the same with the image's package manager; this
writes files only, so it works for any image and runs nothing from it):

- the account `user` (when missing: the next free uid from 1000, a group of its own, home
  /home/user owned by it, shell /bin/bash if the image has one, else /bin/sh), added to copies
  of the image's /etc/passwd, /etc/group and /etc/shadow (when it has one);
- passwordless sudo for it (a file in /etc/sudoers.d) where the image has /usr/bin/sudo;
- /bin/bash, where the image has none, as a script exec'ing its /bin/sh: the SDKs run every
  command as `/bin/bash -l -c CMD` (busybox's and dash's sh take those options too; a link
  would not do: busybox picks its applet by the name it is run as, and has no `bash`).

It refuses an image envd cannot run in: without /bin/sh, without glibc 2.28 or newer (the
self-contained envd artifact's interpreter is linked against it), or without libgcc_s.so.1
(GCC's runtime library: two of the artifact's compiled dependencies, imported at envd's start,
link it; the distributions' images have it, one holding glibc's libraries alone does not).

The image is read through a read-only view of its layers (so whiteouts count), which the caller
mounts on the host for the duration (sandboxd.layers.store.LayerStore.view), with its symbolic
links followed as inside the image (absolute ones from its root)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath

from sandboxd.errors import TemplateError
from sandboxd.layers.image_files import read_capped
from sandboxd.layers.layer_view import MAX_TABLE_BYTES, follow_links

USER = "user"
HOME = f"/home/{USER}"
FIRST_UID = 1000
LAST_UID = 65533  # below nobody's 65534, inside a sandbox's 65536 ids
SUDOERS = f"/etc/sudoers.d/{USER}"
SUDOERS_LINE = f"{USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"
BASH_SCRIPT = '#!/bin/sh\nexec /bin/sh "$@"\n'
MIN_GLIBC = (2, 28)
# The artifact's interpreter asks for this loader (the x86-64 ABI's), then libc.so.6 from the
# loader's default directories (Debian's multiarch ones, Fedora's lib64, Arch's lib).
LOADER = "/lib64/ld-linux-x86-64.so.2"
LIBC_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
             "/lib", "/usr/lib")  # fmt: skip
GCC_RUNTIME = "libgcc_s.so.1"
# The most read of libc.so.6: glibc's is about 2 MiB (2.36, x86-64); past it a build fails.
MAX_LIBC_BYTES = 32 << 20
_GLIBC_VERSION = re.compile(rb"GNU C Library [^\n\0]*release version (\d+)\.(\d+)")


def provision(view: Path, dest: Path) -> None:
    """Write the provisioning layer of the image mounted read-only at `view` (its layers,
    lowest first) into the empty directory `dest`, to be stacked directly above them.

    Raises:
        TemplateError: envd cannot run in the image (no glibc >= 2.28, no libgcc_s.so.1, no
            /bin/sh), or the image's files cannot be read as such (e.g. /etc/passwd is not one).
    """
    image = _Image(view)
    _require_libraries(image)
    if not image.exists("/bin/sh"):
        raise TemplateError("the image has no /bin/sh, which envd runs commands with")
    try:
        _mirror_dir(image, dest, PurePosixPath("."))
        _add_user(image, dest)
        if image.exists("/usr/bin/sudo"):
            _write(image, dest, SUDOERS, SUDOERS_LINE, mode=0o440)
        if not image.exists("/bin/bash"):
            _write(image, dest, "/bin/bash", BASH_SCRIPT, mode=0o755)
    except OSError as exc:
        raise TemplateError(f"provisioning the image: {exc.strerror}: {exc.filename}") from exc


class _Image:
    """Paths in the image at `root`, their symbolic links followed as the image sees them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def real(self, path: str) -> PurePosixPath:
        """`path` (absolute in the image) with the links among its existing components followed:
        relative to the image's root; the part that does not exist is kept as it is.

        Raises:
            TemplateError: a loop of links.
        """

        def readlink(rel: str) -> str | None:
            here = self.root / rel
            return os.readlink(here) if here.is_symlink() else None

        done = follow_links(path, readlink)
        if done is None:
            raise TemplateError(f"the image's {path}: too many levels of links")
        return PurePosixPath(*done) if done else PurePosixPath(".")

    def host(self, path: str) -> Path:
        return self.root / self.real(path)

    def exists(self, path: str) -> bool:
        return self.host(path).exists()

    def read(self, path: str, cap: int) -> bytes:
        """Raises FileNotFoundError, or TemplateError (not a regular file, over `cap`)."""
        return read_capped(self.root, str(self.real(path)), path, cap)


def _library(image: _Image, name: str) -> str | None:
    return next((f"{d}/{name}" for d in LIBC_DIRS if image.exists(f"{d}/{name}")), None)


def _require_libraries(image: _Image) -> None:
    libc = _library(image, "libc.so.6")
    if libc is None or not image.exists(LOADER):
        raise TemplateError(
            f"the image has no glibc ({LOADER} and libc.so.6), which envd needs "
            f"({'.'.join(map(str, MIN_GLIBC))} or newer): musl-based images such as Alpine are "
            "not supported"
        )
    found = _GLIBC_VERSION.search(image.read(libc, MAX_LIBC_BYTES))
    version = (int(found[1]), int(found[2])) if found else None
    if version is None or version < MIN_GLIBC:
        said = "of an unknown version" if version is None else ".".join(map(str, version))
        raise TemplateError(
            f"the image's glibc is {said}: envd needs {'.'.join(map(str, MIN_GLIBC))} or newer"
        )
    if _library(image, GCC_RUNTIME) is None:
        raise TemplateError(
            f"the image has no {GCC_RUNTIME} (GCC's runtime library; Debian's package libgcc-s1), "
            "which envd needs"
        )


def _add_user(image: _Image, dest: Path) -> None:
    passwd = _lines(image, "/etc/passwd") or ["root:x:0:0:root:/root:/bin/sh"]
    if any(line.split(":")[0] == USER for line in passwd):
        return
    groups = _lines(image, "/etc/group") or ["root:x:0:"]
    uid = _free_id({_field(line, 2) for line in passwd})
    own = [_field(line, 2) for line in groups if line.split(":")[0] == USER]
    gid = own[0] if own else _free_id({_field(line, 2) for line in groups}, prefer=uid)
    shell = "/bin/bash" if image.exists("/bin/bash") else "/bin/sh"
    passwd.append(f"{USER}:x:{uid}:{gid}::{HOME}:{shell}")
    _write(image, dest, "/etc/passwd", "\n".join(passwd) + "\n", mode=0o644)
    if not own:
        groups.append(f"{USER}:x:{gid}:")
        _write(image, dest, "/etc/group", "\n".join(groups) + "\n", mode=0o644)
    if image.exists("/etc/shadow"):
        shadow = [*_lines(image, "/etc/shadow"), f"{USER}:!:::::::"]  # no password: sudo, envd
        _write(image, dest, "/etc/shadow", "\n".join(shadow) + "\n", mode=0o640)
    home = image.real(HOME)
    _mirror_dir(image, dest, home.parent)
    (dest / home).mkdir(exist_ok=True)
    os.chown(dest / home, uid, gid)
    (dest / home).chmod(0o755)


def _lines(image: _Image, path: str) -> list[str]:
    """The file's lines without empty ones; none when the image lacks it."""
    try:
        text = image.read(path, MAX_TABLE_BYTES).decode(errors="surrogateescape")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def _field(line: str, index: int) -> int:
    fields = line.split(":")
    try:
        return int(fields[index])
    except (IndexError, ValueError):
        return -1  # a malformed line holds no id


def _free_id(used: set[int], prefer: int | None = None) -> int:
    if prefer is not None and prefer not in used:
        return prefer
    for candidate in range(FIRST_UID, LAST_UID + 1):
        if candidate not in used:
            return candidate
    raise TemplateError(f"the image has no free id from {FIRST_UID} to {LAST_UID} for {USER}")


def _write(image: _Image, dest: Path, path: str, text: str, mode: int) -> None:
    """`text` as the image's `path` in the layer: its owner and mode those of the image's file
    it replaces, or 0:0 and `mode` for a new one."""
    real = image.real(path)
    _mirror_dir(image, dest, real.parent)
    target = dest / real
    target.write_text(text, errors="surrogateescape")
    try:
        st = os.stat(image.root / real)
    except FileNotFoundError:
        os.chown(target, 0, 0)
        target.chmod(mode)
    else:
        os.chown(target, st.st_uid, st.st_gid)
        target.chmod(stat.S_IMODE(st.st_mode))


def _mirror_dir(image: _Image, dest: Path, real: PurePosixPath) -> None:
    """The directories of `real` (link-free, relative to the image's root) in the layer, each
    with the owner and mode of the image's (a directory in an upper layer hides the lower ones'
    attributes), or 0:0 and 0755 where the image has none."""
    parts = [] if str(real) == "." else list(real.parts)
    for depth in range(len(parts) + 1):
        relative = PurePosixPath(*parts[:depth])
        target = dest / relative
        if depth and target.is_dir():
            continue
        target.mkdir(exist_ok=True)
        try:
            st = os.stat(image.root / relative)
            uid, gid, mode = st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            uid, gid, mode = 0, 0, 0o755
        os.chown(target, uid, gid)
        target.chmod(mode)
