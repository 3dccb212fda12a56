"""The runtime's error vocabulary: every failure sandboxd's runtime raises is one of these, with a
message that says what failed and where (the API maps them to HTTP answers once, at its edge)."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class: something about a sandbox or template could not be done."""


class TemplateError(SandboxError):
    """A template's root filesystem is missing, unusable, or could not be built."""


class BootError(SandboxError):
    """A sandbox did not come up (nspawn exited, no leader, envd never answered); everything
    the boot made has been removed again."""


class HostError(SandboxError):
    """The host lacks something the runtime needs (root, cgroup2, systemd-nspawn, overlayfs)."""


class TeardownError(SandboxError):
    """Killing a sandbox left something behind (a busy mount, a cgroup that would not empty);
    the message names what."""


class RequestError(Exception):
    """A control-API request that cannot be done as asked; `status` is the HTTP status the API
    answers with (its body is `{"code": status, "message": message}`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
