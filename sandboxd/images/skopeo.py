"""Fetching an image from a registry with skopeo (Debian's): `skopeo copy docker://REF dir:DIR`
writes the manifest as the registry served it (the platform's one, picked from a list) and each
blob named by its digest. skopeo speaks the registry protocol (token auth, redirects, manifest
lists, schema conversions) so sandboxd does not; it reads no host configuration here (its own
policy, registries and auth files), so what is pulled from where is what the caller said."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandboxd.errors import HostError, ImageError, ImageNotFound, NotAllowed

if TYPE_CHECKING:
    from pathlib import Path

    from sandboxd.images.reference import ImageRef

# Signatures are not checked (sandboxd checks every blob against the digest the manifest names).
POLICY = {"default": [{"type": "insecureAcceptAnything"}]}
# What registries answer for a name, tag or digest they do not have (Docker Hub answers a
# missing repository as if it were private: "requested access to the resource is denied").
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "requested access to the resource")
_PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")


@dataclass(frozen=True)
class Credentials:
    """A registry account (fromImageRegistry's username and password)."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials({self.username!r}, <password>)"


def copy_to_dir(
    ref: ImageRef,
    dest: Path,
    work: Path,
    credentials: Credentials | None = None,
    insecure: bool = False,
) -> None:
    """Copy the image `ref` (for this machine's platform) into the `dir:` layout `dest`.

    Args:
        work: a private directory for skopeo's configuration and temporary files.
        insecure: plain HTTP or an unverified certificate, only for a registry on loopback.

    Raises:
        NotAllowed: `insecure` for a registry not on loopback.
        ImageNotFound: the registry has no such image.
        ImageError: the registry refused or could not be reached, or skopeo failed.
        HostError: skopeo is not installed.
    """
    if insecure and not ref.on_loopback():
        raise NotAllowed(f"registry {ref.registry}: insecure pulls only from 127.0.0.1/localhost")
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise HostError("skopeo is missing (scripts/install installs it)")
    argv = [
        skopeo, "--policy", str(_write(work / "policy.json", POLICY)),
        "copy", "--quiet", "--authfile", str(_auth_file(work, ref, credentials)),
        f"--src-tls-verify={'false' if insecure else 'true'}",
        f"docker://{ref}", f"dir:{dest}",
    ]  # fmt: skip
    done = subprocess.run(argv, env=_env(work), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise _error(ref, done.stderr)


def _env(work: Path) -> dict[str, str]:
    """No registries.conf of the host's (its mirrors and aliases), temporary blobs in `work`."""
    registries = work / "registries.conf"
    registries.write_text("")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(work), "TMPDIR": str(work),
           "CONTAINERS_REGISTRIES_CONF": str(registries)}  # fmt: skip
    env |= {k: v for k in _PROXY_VARS if (v := os.environ.get(k))}
    return env


def _auth_file(work: Path, ref: ImageRef, credentials: Credentials | None) -> Path:
    """An auth file with `credentials` for the registry or none: never the host's (root's
    ~/.docker/config.json), so a pull gets no account it was not given."""
    auths = {}
    if credentials is not None:
        token = f"{credentials.username}:{credentials.password}".encode()
        auths[ref.registry] = {"auth": base64.b64encode(token).decode()}
    return _write(work / "auth.json", {"auths": auths})


def _write(path: Path, doc: object) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the password may be in it
    with open(fd, "w") as f:
        json.dump(doc, f)
    return path


def _error(ref: ImageRef, stderr: str) -> ImageError | ImageNotFound:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else "skopeo failed without a message"
    detail = detail.split('msg="', 1)[-1].rstrip('"').replace('\\"', '"')
    if any(words in detail.lower() for words in _NOT_FOUND):
        return ImageNotFound(str(ref), detail)
    return ImageError(f"pulling {ref}: {detail}")
