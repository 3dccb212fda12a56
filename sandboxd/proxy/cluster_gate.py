"""The sandbox proxy as a node agent's internal proxy port (`sandboxd node --proxy-listen`):
only requests carrying the cluster token in `X-Sandboxd-Cluster-Token` (which gateways add)
are relayed, the header taken out first so that no sandbox ever sees it; anything else is a
401. The port serves sandboxes only: a request for none is a 404."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from sandboxd.proxy.exchange import Answer, json_answer
from sandboxd.proxy.relay import SandboxProxy

if TYPE_CHECKING:
    from sandboxd.proxy.exchange import Client, Exchange, Request
    from sandboxd.proxy.routing import SandboxLookup

CLUSTER_TOKEN_HEADER = b"x-sandboxd-cluster-token"


class ClusterProxy(SandboxProxy):
    """A SandboxProxy that relays only requests with the cluster `token`."""

    def __init__(self, lookup: SandboxLookup, domain: str, token: str) -> None:
        super().__init__(lookup, domain)
        self._token = token.encode()

    def exchange(self, request: Request, client: Client) -> Exchange | None:
        given = [v for n, v in request.raw_headers if n.lower() == CLUSTER_TOKEN_HEADER]
        if len(given) != 1 or not hmac.compare_digest(given[0], self._token):
            message = "the node's proxy needs the cluster token (X-Sandboxd-Cluster-Token)"
            return Answer(client, request, *json_answer({"code": 401, "message": message},
                                                        b"401 Unauthorized"))  # fmt: skip
        request.raw_headers[:] = [
            (n, v) for n, v in request.raw_headers if n.lower() != CLUSTER_TOKEN_HEADER
        ]
        relayed = super().exchange(request, client)
        if relayed is None:
            return Answer(client, request, *json_answer(
                {"code": 404, "message": "the node's proxy serves sandboxes only"},
                b"404 Not Found"))  # fmt: skip
        return relayed
