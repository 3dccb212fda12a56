"""What passes between sandboxd's listener and whatever answers a request on it: the client's
connection as an exchange sees it (`Client`), an exchange (`Exchange`: a relay into a sandbox,
a control API request, or an answer of the proxy's own), the request as the proxy needs it, and
the proxy's own answers (E2B's 400, 403, 404, 409 and 502)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sandboxd.proxy.routing import RequestHead, Target


class Client(Protocol):
    """The client's connection, as an exchange sees it (sandboxd.proxy.listener)."""

    def write(self, data: bytes | memoryview) -> bool:
        """True when the transport keeps `data` queued (the client is slower)."""

    def backed_up(self) -> bool:
        """The transport holds bytes not yet sent: a write now is queued behind them."""

    def answered(self, keep_alive: bool) -> None:
        """The response is complete; the connection may carry the next one if `keep_alive`."""

    def abort(self) -> None:
        """Drop the connection: the response cannot be whole."""

    def hold_reading(self, reason: str, hold: bool) -> None:
        """Stop (or resume) reading the request for `reason`; reading resumes with no reason
        left."""


class Exchange(Protocol):
    """One request on a client's connection and its answer."""

    def start(self) -> None:
        """Its turn to answer (the connection's earlier responses are complete)."""

    def body(self, data: bytes) -> None: ...

    def end(self) -> None:
        """The whole request was received."""

    def flush(self) -> None:
        """The bytes of the request that came in one read have all been given."""

    def client_writable(self, writable: bool) -> None:
        """The client's side is full (False) or has room again (True)."""

    def client_lost(self) -> None: ...


class Request:
    """What the proxy needs of a request besides its routing head."""

    def __init__(self, head: RequestHead, raw_headers: list[tuple[bytes, bytes]],
                 version: str, keep_alive: bool, upgrade: bool = False) -> None:  # fmt: skip
        self.head, self.raw_headers = head, raw_headers
        self.version, self.keep_alive = version, keep_alive
        # An upgrade's bytes after its head are the new protocol's: httptools hands on no body.
        self.upgrade = upgrade


class Answer:
    """An answer of the proxy's own (E2B's 400, 403, 404, 409 and 502); the request body is
    dropped."""

    def __init__(self, client: Client, request: Request, status: bytes, body: bytes,
                 media: bytes) -> None:  # fmt: skip
        self.client, self.keep_alive = client, request.keep_alive
        self.response = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
            status,
            media,
            len(body),
            b"" if request.head.method == "HEAD" else body,  # the length only, as for GET
        )

    def start(self) -> None:
        self.client.write(self.response)
        self.client.answered(self.keep_alive)

    def body(self, data: bytes) -> None:
        pass

    def end(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def client_writable(self, writable: bool) -> None:
        pass

    def client_lost(self) -> None:
        pass


def sandbox_not_found(target: Target) -> tuple[bytes, bytes, bytes]:
    return json_answer(
        {"sandboxId": target.sandbox_id, "message": "The sandbox was not found", "code": 502}
    )


def json_answer(
    body: dict[str, object], status: bytes = b"502 Bad Gateway"
) -> tuple[bytes, bytes, bytes]:
    return status, json.dumps(body).encode(), b"application/json"


def plain_answer(status: int, text: str) -> tuple[bytes, bytes, bytes]:
    reason = {400: b"Bad Request", 404: b"Not Found"}[status]
    return b"%d %s" % (status, reason), text.encode() + b"\n", b"text/plain; charset=utf-8"
