"""The two systemd touch points: sd_notify() for Type=notify, and whether stderr is journald."""

from __future__ import annotations

import os
import socket


def sd_notify(message: str, address: str | None = None) -> bool:
    """Send a notification (e.g. "READY=1") to the service manager, if there is one.

    Returns whether it was sent. Abstract socket names ("@...") are supported. `address` is
    $NOTIFY_SOCKET unless given (sandboxd takes it out of its environment, away from its children).
    """
    address = address or os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError:
            return False
    return True


def under_journald() -> bool:
    """True when stderr is the journal's stream socket (systemd sets JOURNAL_STREAM=dev:ino)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = stream.partition(":")
    if not dev or not ino:
        return False
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return f"{st.st_dev}:{st.st_ino}" == stream
