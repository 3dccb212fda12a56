"""What the proxy needs of the lifecycle to let a request in to a sandbox: where the sandbox runs
(`Location`) and its rules for requests to its own ports (`Ingress`, from its create's `network`
options). Plain data the lifecycle keeps with each sandbox and the proxy applies; a lookup on
another machine can hand the same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandboxd.runtime.dialer import Dialer

MASK_PORT = "${PORT}"
# The node of a sandbox run by this process's own lifecycle.
LOCAL_NODE = "local"


@dataclass(frozen=True)
class Location:
    """Where a running sandbox is reached: the node that runs it, and a dialer to its ports from
    here (for a sandbox on another machine, one that connects through that node). Two are equal
    while the sandbox runs on as it did; a pause and resume make a new one."""

    node: str
    dialer: Dialer


@dataclass(frozen=True)
class Ingress:
    """A sandbox's rules for requests to its own ports, as E2B's proxy applies them (envd's
    port has its own access token and is exempt): with `traffic_token`, a request must carry
    it in `e2b-traffic-access-token` (403 otherwise); with `mask_host`, its Host header is
    replaced by it, `${PORT}` in it by the port."""

    traffic_token: str | None = None
    mask_host: str | None = None

    def host_for(self, port: int) -> bytes | None:
        if self.mask_host is None:
            return None
        return self.mask_host.replace(MASK_PORT, str(port)).encode()


@dataclass(frozen=True)
class Credentials:
    """The access tokens a request to a sandbox carries (`X-Access-Token` for envd's port,
    `e2b-traffic-access-token` for its own ports), None for a header it lacks: what a request
    that would resume a paused sandbox is checked by."""

    envd_token: str | None = None
    traffic_token: str | None = None
