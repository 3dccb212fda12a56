"""A sandbox's rules for requests the proxy lets in to its own ports, from its create's
`network` options: plain data the lifecycle keeps with each sandbox and the proxy applies."""

from __future__ import annotations

from dataclasses import dataclass

MASK_PORT = "${PORT}"


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
