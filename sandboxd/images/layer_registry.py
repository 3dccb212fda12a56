"""The layer store's layers kept in an OCI registry (CNCF Distribution's HTTP API, the OCI
distribution spec), so that a template built, snapshotted or paused to disk on one machine boots
on another. Each layer is one image in one repository, tagged by the layer's name: an
uncompressed tar of its tree (sandboxd.layers.layer_tar) as its one layer blob, a config naming
that tar's digest as its diff_id, and an OCI manifest. A push skips what the registry has (a
HEAD of the tag, then of each blob); a pull downloads into the store's private `.pull-`
directory, checks every blob against its digest (sandboxd.images.manifest) and unpacks the tar
as an image layer (sandboxd.images.unpack), made whole or not at all by the layer store.

httpcore (sandboxd's HTTP client already) speaks to the registry rather than skopeo: a push is
a handful of requests whose bodies stream from the state disk; skopeo would copy each layer
into a `dir:` layout first and gzip it on its way to a registry, which costs more CPU than the
copy itself. Blocking: callers on the event loop run it in a thread."""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import re
from typing import IO, TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

import httpcore

from sandboxd.errors import NotAllowed, RegistryError
from sandboxd.host.removal import remove_tree
from sandboxd.images import manifest
from sandboxd.images.reference import LOOPBACK_HOSTS
from sandboxd.images.unpack import unpack
from sandboxd.layers.layer_tar import write_layer_tar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from sandboxd.images.skopeo import Credentials
    from sandboxd.images.unpack import Quota
    from sandboxd.layers.store import LayerStore

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DEFAULT_REPOSITORY = "sandboxd/layers"
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_TIMEOUTS = {"connect": 10.0, "read": 120.0, "write": 120.0, "pool": 120.0}
_CHUNK = 1 << 20
_REDIRECTS = 3


class LayerRegistry:
    """The repository `url` names (`http[s]://HOST[:PORT][/REPOSITORY]`, default repository
    `sandboxd/layers`), reached with `credentials` (basic auth) or `token` (a bearer token).

    Raises:
        NotAllowed: a URL that is not http(s), or plain http to a host not on loopback.
    """

    def __init__(self, url: str, credentials: Credentials | None = None, token: str | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise NotAllowed(f"registry URL '{url}': give http(s)://HOST[:PORT][/REPOSITORY]")
        if parts.scheme == "http" and parts.hostname not in {h.strip("[]") for h in LOOPBACK_HOSTS}:
            raise NotAllowed(f"registry '{parts.netloc}': plain http only to 127.0.0.1/localhost")
        self.url = url
        self.repository = parts.path.strip("/") or DEFAULT_REPOSITORY
        self._base = f"{parts.scheme}://{parts.netloc}/v2/{self.repository}/"
        self._auth = _authorization(credentials, token)
        self._pool = httpcore.ConnectionPool(max_connections=4)

    def close(self) -> None:
        self._pool.close()

    def has(self, name: str) -> bool:
        """Whether the registry has the layer `name`.

        Raises:
            RegistryError: it could not be asked.
        """
        return self._exists(f"manifests/{_tag(name)}", OCI_MANIFEST)

    def push(self, layer: Path, store: LayerStore) -> bool:
        """Push the layer directory `layer` of `store` unless the registry has it; whether
        this call pushed it. Its tar is staged in the store's private pull directory.

        Raises:
            RegistryError: the registry could not be reached or refused.
            OSError: the layer could not be read.
        """
        tag = _tag(layer.name)
        if self.has(layer.name):
            return False
        work = store.pull_dir()
        try:
            staged = work / "layer.tar"
            with open(staged, "wb") as out:
                hashing = _HashingWriter(out)
                write_layer_tar(layer, hashing)
            digest, size = hashing.digest(), hashing.size
            self._put_blob(digest, size, lambda: _chunks(staged))
            config = _config(digest)
            config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
            self._put_blob(config_digest, len(config), lambda: iter((config,)))
            body = _manifest(config_digest, len(config), digest, size)
            self._call("PUT", f"manifests/{tag}", (201,), body, {"Content-Type": OCI_MANIFEST})
        finally:
            remove_tree(work)
        return True

    def pull(self, name: str, store: LayerStore, quota: Quota | None = None) -> Path:
        """The layer `name` in `store`: pulled from the registry unless the store has it,
        within `quota`.

        Raises:
            RegistryError: the registry has no such layer, could not be reached or refused.
            ImageError: a blob is not what its digest says, or the tar would leave its layer
                (nothing of the layer is left).
            Exception: `quota.full(...)`, as the unpack raises it.
        """
        tag = _tag(name)

        def make(new: Path) -> None:
            work = store.pull_dir()
            try:
                blob = self._download(tag, work / "image")
                unpack(blob.path, new, blob.diff_id, quota)
            finally:
                remove_tree(work)

        path, _ = store.add(name, make)
        return path

    def _download(self, tag: str, layout: Path) -> manifest.LayerBlob:
        """The image `tag` downloaded into the `dir:` layout `layout`, verified; its one layer.

        Raises:
            RegistryError: no such tag, or a failed request; ImageError: a bad blob.
        """
        layout.mkdir()
        raw = self._call("GET", f"manifests/{tag}", (200,), headers={"Accept": OCI_MANIFEST})
        (layout / "manifest.json").write_bytes(raw)
        try:
            doc = json.loads(raw)
            digests = [doc["config"]["digest"], *(layer["digest"] for layer in doc["layers"])]
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryError(f"layer {tag}: a malformed manifest ({exc!r})") from exc
        for digest in digests:
            if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
                raise RegistryError(f"layer {tag}: its manifest names blob {digest!r}")
            with open(layout / digest.removeprefix("sha256:"), "wb") as out:
                self._fetch(f"blobs/{digest}", out)
        pulled = manifest.read(layout)
        if len(pulled.layers) != 1:
            raise RegistryError(f"layer {tag}: an image of {len(pulled.layers)} layers, not one")
        return pulled.layers[0]

    def _put_blob(self, digest: str, size: int, body: Callable[[], Iterator[bytes]]) -> None:
        """Upload a blob unless the registry has it: POST an upload, PUT it whole."""
        if self._exists(f"blobs/{digest}"):
            return
        response = self._request("POST", "blobs/uploads/", b"", {})
        _check(response, (202,), "starting an upload")
        location = _header(response, b"location")
        url = urljoin(self._base, location)
        url += ("&" if "?" in url else "?") + f"digest={digest}"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        _check(self._request("PUT", url, body(), headers), (201,), f"uploading blob {digest}")

    def _exists(self, path: str, accept: str | None = None) -> bool:
        response = self._request("HEAD", path, b"", {"Accept": accept} if accept else {})
        if response.status == 404:
            return False
        _check(response, (200,), f"asking for {path}")
        return True

    def _call(self, method: str, path: str, ok: tuple[int, ...], body: bytes = b"",
              headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
        response = self._request(method, path, body, headers or {})
        _check(response, ok, f"{method} {path}")
        return response.content

    def _fetch(self, path: str, out: IO[bytes]) -> None:
        """Stream the GET of `path` into `out`, following redirects (to a blob's storage).

        Raises:
            RegistryError: the request failed or was refused.
        """
        url = urljoin(self._base, path)
        for _ in range(_REDIRECTS):
            try:
                with self._pool.stream("GET", url, headers=self._headers({}),
                                       extensions={"timeout": _TIMEOUTS}) as response:  # fmt: skip
                    if response.status in (301, 302, 303, 307, 308):
                        url = urljoin(url, _header(response, b"location"))
                        continue
                    if response.status != 200:
                        response.read()
                        _check(response, (200,), f"GET {path}")
                    for chunk in response.iter_stream():
                        out.write(chunk)
                    return
            except httpcore.TimeoutException as exc:
                raise RegistryError(f"registry {self.url}: GET {path}: {exc!r}") from exc
            except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
                raise RegistryError(f"registry {self.url} cannot be reached: {exc}") from exc
        raise RegistryError(f"registry {self.url}: GET {path}: too many redirects")

    def _request(self, method: str, path: str, body: bytes | Iterator[bytes],
                 headers: dict[str, str]) -> httpcore.Response:  # fmt: skip
        url = urljoin(self._base, path)
        try:
            return self._pool.request(method, url, headers=self._headers(headers), content=body,
                                      extensions={"timeout": _TIMEOUTS})  # fmt: skip
        except httpcore.TimeoutException as exc:
            raise RegistryError(f"registry {self.url}: {method} {path}: {exc!r}") from exc
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise RegistryError(f"registry {self.url} cannot be reached: {exc}") from exc

    def _headers(self, headers: dict[str, str]) -> list[tuple[str, str]]:
        auth = [("Authorization", self._auth)] if self._auth else []
        return [*headers.items(), *auth]


class _HashingWriter:
    """A file that hashes and counts what is written to it (a blob's digest and size)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)

    def digest(self) -> str:
        return f"sha256:{self.sha.hexdigest()}"


def _authorization(credentials: Credentials | None, token: str | None) -> str | None:
    if token:
        return f"Bearer {token}"
    if credentials is not None:
        pair = f"{credentials.username}:{credentials.password}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"
    return None


def _tag(name: str) -> str:
    """The tag of the layer `name` (its directory's name in the layer store).

    Raises:
        RegistryError: the name is no tag (the distribution spec's grammar).
    """
    if not _TAG.fullmatch(name):
        raise RegistryError(f"layer '{name}' cannot be a registry tag")
    return name


def _check(response: httpcore.Response, ok: tuple[int, ...], doing: str) -> None:
    """Raises RegistryError with the registry's own message unless the status is in `ok`."""
    if response.status in ok:
        return
    detail = response.content.decode("utf-8", "replace")[:500]
    try:
        errors = json.loads(detail)["errors"]
        detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    if response.status == 404:
        raise RegistryError(f"the registry has no {doing.split(' ', 1)[-1]} ({detail})")
    raise RegistryError(f"registry {doing}: HTTP {response.status} {detail}".rstrip())


def _header(response: httpcore.Response, name: bytes) -> str:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    raise RegistryError(f"the registry's answer {response.status} has no {name.decode()} header")


def _chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _config(diff_id: str) -> bytes:
    """An image config of one layer (no process to run: sandboxd boots its layers itself)."""
    arch = _ARCH.get(platform.machine(), platform.machine())
    doc = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    return json.dumps(doc, sort_keys=True).encode()


def _manifest(config_digest: str, config_size: int, digest: str, size: int) -> bytes:
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": OCI_LAYER, "digest": digest, "size": size}],
    }
    return json.dumps(doc, sort_keys=True).encode()
