"""A registry of the test's own: Debian's docker-registry on 127.0.0.1 (a port the kernel picks),
its storage and config in a temporary directory, and skopeo pushes of OCI layouts to it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from tests.waiting import wait_until

# /proc/net/tcp's state of a listening socket.
TCP_LISTEN = "0A"
# The private registry's one account (a password with a space and a colon in it).
ACCOUNT = ("builder", "s3cret pass:word")
CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:0
  secret: tests-only
"""
# Basic auth against an htpasswd file (bcrypt entries only: docker-registry takes no others).
AUTH = """\
auth:
  htpasswd:
    realm: tests
    path: {htpasswd}
"""


@dataclass
class Registry:
    process: subprocess.Popen[bytes]
    dir: Path
    host: str = ""  # 127.0.0.1:PORT once it listens
    account: tuple[str, str] | None = None
    # Runs the registry and skopeo elsewhere, e.g. nsenter into a network namespace.
    prefix: tuple[str, ...] = ()

    def push(self, layout: Path, name: str, *options: str) -> None:
        """Push the OCI layout `layout`'s `latest` image (or index, with --all) as `name`
        (`repo:tag`); `options` go to skopeo copy (--format v2s2: Docker's manifests)."""
        creds = ["--dest-creds", ":".join(self.account)] if self.account else []
        subprocess.run(
            [*self.prefix, "skopeo", "--policy", str(self.dir / "policy.json"), "copy", "--quiet",
             *creds, *options,
             "--dest-tls-verify=false", f"oci:{layout}:latest", f"docker://{self.host}/{name}"],
            check=True, capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": str(self.dir)},
        )  # fmt: skip

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps the blob `digest` (tests alter it there)."""
        hex_digest = digest.removeprefix("sha256:")
        return self.dir / f"data/docker/registry/v2/blobs/sha256/{hex_digest[:2]}/{hex_digest}/data"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_registry(
    dir: Path, account: tuple[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Registry:
    """docker-registry serving from `dir`; with `account` (user, password), only to it; run
    with `prefix` before its command (and skopeo's), e.g. in a network namespace's loopback."""
    config = CONFIG.format(root=dir / "data")
    if account is not None:
        (dir / "htpasswd").write_text(f"{account[0]}:{_bcrypt(account[1])}\n")
        config += AUTH.format(htpasswd=dir / "htpasswd")
    (dir / "config.yml").write_text(config)
    (dir / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
    log = open(dir / "registry.log", "wb")  # noqa: SIM115  # the process holds it
    process = subprocess.Popen(
        [*prefix, "docker-registry", "serve", str(dir / "config.yml")],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    registry = Registry(process, dir, account=account, prefix=prefix)
    try:
        port = wait_until(lambda: _listening_port(process), 30, "docker-registry listening")
    except BaseException:
        registry.stop()
        raise
    registry.host = f"127.0.0.1:{port}"
    return registry


def _listening_port(process: subprocess.Popen[bytes]) -> int | None:
    """The TCP port `process` listens on, read from its own /proc/PID/net/tcp: that is the
    table of its network namespace (psutil reads the caller's, which misses a registry started
    in another namespace)."""
    assert process.poll() is None, "docker-registry exited"
    proc = Path(f"/proc/{process.pid}")
    sockets = set()
    for fd in (proc / "fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(fd)
            if target.startswith("socket:["):
                sockets.add(target.removeprefix("socket:[").removesuffix("]"))
    for line in (proc / "net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == TCP_LISTEN and inode in sockets:
            return int(local.split(":")[1], 16)
    return None


def _bcrypt(password: str) -> str:
    """glibc's crypt (libxcrypt) makes bcrypt hashes; Python's wrapper of it is deprecated
    (removed in 3.13), hence the silenced warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        # bcrypt: the only hash docker-registry checks (not a weak one).
        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))  # noqa: S324
