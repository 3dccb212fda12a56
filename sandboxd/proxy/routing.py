"""Which sandbox and port a request to the sandbox proxy is for (docs/sandboxd.md, "The proxy").

Three ways in, as the SDKs and browsers use them:
- the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers, honoured only when Host is `localhost`,
  an IP literal or `sandbox.<domain>` (the SDKs with `E2B_SANDBOX_URL` set);
- a Host `{port}-{sandboxID}.{domain}` (`get_host()` and download URLs over host routing);
  one of that form under another domain (E2B's `e2b.app`, say) is answered 400 naming
  serve's, not left to the control API's 401;
- a header-less `GET`/`POST /files` whose `signature` reproduces one sandbox's token (the local
  fallback for `download_url()` under `E2B_SANDBOX_URL`; not reference behaviour).
"""

from __future__ import annotations

import functools
import ipaddress
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qsl, unquote

import httptools

from sandboxd.guest.client import ENVD_PORT
from sandboxd.ids import is_sandbox_id

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandboxd.lifecycle.ingress import Credentials, Ingress, Location

# envd's routes only E2B's orchestrator may call (reference: internal_routes.go).
ENVD_CONTROL_PATHS = frozenset(
    ("/init", "/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse", "/upgrade")
)
SIGNED_FILE_OPERATIONS = {"GET": "read", "POST": "write"}
ID_HEADER = b"e2b-sandbox-id"
PORT_HEADER = b"e2b-sandbox-port"
TRAFFIC_TOKEN_HEADER = b"e2b-traffic-access-token"
ACCESS_TOKEN_HEADER = b"x-access-token"  # envd's


class SandboxLookup(Protocol):
    """What the proxy asks about sandboxes: the lifecycle manager of this machine, or whatever
    knows the sandboxes of several (plain data in and out)."""

    def locate(self, sandbox_id: str) -> Location | None:
        """Where the running sandbox is; None when unknown, killed or paused."""
        ...

    async def wake(self, sandbox_id: str, port: int, credentials: Credentials) -> Location | None:
        """Resume a paused sandbox whose create enabled auto-resume, for a request to `port`
        that carries `credentials` (a pause or resume under way waited for); where it runs
        then, None when it does not (unknown, killed, without auto-resume, paused to disk).

        Raises:
            StillTransitioning: a pause or resume was still under way after a minute.
            WakeRefused: the credentials do not fit the port (it stays paused).
            SandboxError: the resume failed.
        """
        ...

    def ingress(self, sandbox_id: str) -> Ingress:
        """How requests to the sandbox's own ports (not envd's) are let in."""
        ...

    def sandbox_for_signature(
        self, path: str, operation: str, username: str, signature: str, expiration: str | None
    ) -> str | None:
        """The running secure sandbox whose envd token makes `signature` for these /files
        values (the raw query values, as envd signs them)."""
        ...


class RouteError(Exception):
    """A request that names no valid sandbox or port: 400 with this plain-text message."""


@dataclass(frozen=True)
class Target:
    sandbox_id: str
    port: int


@dataclass(frozen=True)
class RequestHead:
    """What routing reads of a request: its method, target and headers."""

    method: str
    url: bytes  # the request target as sent
    path: str  # percent-decoded, as an ASGI server gives it
    query: bytes
    headers: dict[bytes, bytes]  # by lower-case name, the last one wins (as envd reads them)

    @classmethod
    def parse(cls, method: bytes, url: bytes, raw: list[tuple[bytes, bytes]]) -> RequestHead:
        """Raises httptools.HttpParserInvalidURLError for a target that is not a URL."""
        if url.startswith(b"/"):  # origin form, what clients send: no parse needed
            raw_path, _, query = url.partition(b"?")
        else:  # absolute form (`http://host/path`), as to a forward proxy
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path or b"/", parsed.query or b""
        path = raw_path.decode("latin-1")
        return cls(
            method.decode("latin-1"),
            url,
            unquote(path) if "%" in path else path,
            query,
            {name.lower(): value for name, value in raw},
        )

    @property
    def host(self) -> str:
        return self.headers.get(b"host", b"").decode("latin-1")


def hostname(host: str) -> str:
    """Host without its port: `a.b:3000` → `a.b`, `[::1]:3000` → `::1`."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# A client sends the same Host on every request: the answers below are worth keeping (the
# ipaddress parse alone costs microseconds per request).
@functools.lru_cache(maxsize=256)
def honours_headers(host: str, domain: str) -> bool:
    """The reference reads the routing headers only on these hosts."""
    name = hostname(host)
    return name == "localhost" or _is_ip(name) or name == f"sandbox.{hostname(domain)}"


@functools.lru_cache(maxsize=256)
def is_sandbox_host(host: str, domain: str) -> bool:
    """`{something}.{domain}` other than the control API's `api.{domain}`."""
    name, base = hostname(host), hostname(domain)
    return name.endswith(f".{base}") and name != f"api.{base}"


@functools.lru_cache(maxsize=256)
def is_foreign_sandbox_host(host: str, domain: str) -> bool:
    """`{port}-{sandboxID}.{other}`: a sandbox host under a domain that is not serve's."""
    name = hostname(host)
    if "." not in name or is_sandbox_host(host, domain) or honours_headers(host, domain):
        return False
    port, dash, sandbox_id = name.split(".", 1)[0].partition("-")
    return bool(dash) and port.isascii() and port.isdigit() and is_sandbox_id(sandbox_id)


def _port(text: str) -> int:
    # isdigit alone admits digits int() refuses ("²"): the error would escape as a dropped
    # connection instead of this 400.
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise RouteError(f"Invalid sandbox port {text!r}")
    return int(text)


def _sandbox_id(text: str) -> str:
    if not is_sandbox_id(text):
        raise RouteError("Invalid sandbox ID")
    return text


def target_from_headers(headers: Mapping[bytes, bytes]) -> Target | None:
    """The target the routing headers name; None when neither is present.

    Raises:
        RouteError: only one of them is present, or one is malformed.
    """
    sandbox_id, port = headers.get(ID_HEADER), headers.get(PORT_HEADER)
    if sandbox_id is None and port is None:
        return None
    if sandbox_id is None or port is None:
        missing = "E2b-Sandbox-Id" if sandbox_id is None else "E2b-Sandbox-Port"
        raise RouteError(f"missing header {missing}")
    return Target(_sandbox_id(sandbox_id.decode("latin-1")), _port(port.decode("latin-1")))


def target_from_host(host: str) -> Target:
    """`{port}-{sandboxID}.{anything}`.

    Raises:
        RouteError: no dot in the host, or a first label not of that form.
    """
    name = hostname(host)
    if "." not in name:
        raise RouteError(f"Invalid host {host!r}: expected {{port}}-{{sandboxID}}.{{domain}}")
    port, dash, sandbox_id = name.split(".", 1)[0].partition("-")
    if not dash:
        raise RouteError(f"Invalid host {host!r}: expected {{port}}-{{sandboxID}}.{{domain}}")
    return Target(_sandbox_id(sandbox_id), _port(port))


def signed_files_query(head: RequestHead) -> dict[str, str] | None:
    """The query of a `GET`/`POST /files` that carries a `signature`; None for anything else."""
    if head.path != "/files" or head.method not in SIGNED_FILE_OPERATIONS:
        return None
    query = dict(parse_qsl(head.query.decode("latin-1"), keep_blank_values=True))
    return query if "signature" in query else None


def target_by_signature(head: RequestHead, lookup: SandboxLookup) -> Target | None:
    """envd's port of the sandbox a signed `/files` URL was made for, if any."""
    query = signed_files_query(head)
    if query is None:
        return None
    sandbox_id = lookup.sandbox_for_signature(
        query.get("path", ""),
        SIGNED_FILE_OPERATIONS[head.method],
        query.get("username", ""),
        query["signature"],
        query.get("signature_expiration"),
    )
    return None if sandbox_id is None else Target(sandbox_id, ENVD_PORT)


def is_sandbox_request(head: RequestHead, domain: str, lookup: SandboxLookup) -> bool:
    """Whether the request is for the proxy rather than the control API: routing headers on a
    host that honours them, a `{port}-{id}.{domain}` host (or one under another domain, to be
    refused), or a header-less signed `/files` URL that one sandbox's token signed."""
    host = head.host
    if is_sandbox_host(host, domain) or is_foreign_sandbox_host(host, domain):
        return True
    if not honours_headers(host, domain):
        return False
    if ID_HEADER in head.headers or PORT_HEADER in head.headers:
        return True
    return signed_files_query(head) is not None and (target_by_signature(head, lookup) is not None)


def resolve(head: RequestHead, domain: str, lookup: SandboxLookup) -> Target:
    """The sandbox and port a request dispatched to the proxy is for.

    Raises:
        RouteError: the request names no valid target (answered 400).
    """
    host = head.host
    if honours_headers(host, domain):
        target = target_from_headers(head.headers)
        if target is not None:
            return target
        by_signature = target_by_signature(head, lookup)
        if by_signature is not None:
            return by_signature
        raise RouteError("missing header E2b-Sandbox-Id")
    if is_foreign_sandbox_host(host, domain):
        raise RouteError(f"Host {host!r} is not under this sandboxd's domain {domain!r}: "
                         f"sandbox hosts are {{port}}-{{sandboxID}}.{domain}")  # fmt: skip
    return target_from_host(host)


def is_envd_control_path(target: Target, path: str) -> bool:
    """An orchestrator-only envd route, after cleaning (`//init/`, `/a/../init` included)."""
    if target.port != ENVD_PORT:
        return False
    return posixpath.normpath("/" + path.lstrip("/")) in ENVD_CONTROL_PATHS
