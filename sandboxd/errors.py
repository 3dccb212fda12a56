"""sandboxd's error vocabulary below the API: every failure the lifecycle, the templates and the
host runtime raise is one of these, with a message that says what failed and where. The API
maps them to HTTP answers once, at its edge (sandboxd/api/errors.py); nothing below it knows
HTTP statuses."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class: something about a sandbox or template could not be done."""


class NotFound(SandboxError):
    """No such sandbox or template (or a sandbox in a state where it counts as gone)."""


class SandboxNotFound(NotFound):
    def __init__(self, sandbox_id: str) -> None:
        # The reference's words: the SDKs show them as they are.
        super().__init__(f"Sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it")


class TemplateNotFound(NotFound):
    def __init__(self, template: str) -> None:
        super().__init__(f"template '{template}' not found")


class ImageNotFound(NotFound):
    """The registry has no such image (repository, tag or digest)."""

    def __init__(self, reference: str, detail: str) -> None:
        super().__init__(f"image '{reference}' not found: {detail}")


class VolumeNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("Volume not found")  # the reference's words


class PathNotFound(NotFound):
    """No such file or directory in a volume."""


class WrongState(SandboxError):
    """The sandbox is not in the state the operation needs (pausing a paused one)."""


class StillTransitioning(WrongState):
    """A pause or resume of the sandbox was still under way after the wait for it to end."""


class WakeRefused(SandboxError):
    """A request that would resume a paused sandbox does not carry the sandbox's access token
    (envd's, or for its own ports the traffic token): it stays paused."""


class PathExists(WrongState):
    """A volume's path is taken: a file written or a directory made there without `force`."""


class VolumeFull(SandboxError):
    """A write into a volume found its filesystem full (its size limit)."""


class NotAllowed(SandboxError):
    """A request the rules refuse whatever the state of the host: a timeout past the maximum
    length, deleting the base template or one that sandboxes use."""


class InitRefused(SandboxError):
    """envd refused the /init sandboxd sent (its answer will not change with retries): the env
    vars or metadata of the create were malformed, or too large for envd (`too_large`)."""

    def __init__(self, message: str, *, too_large: bool) -> None:
        super().__init__(message)
        self.too_large = too_large


class TemplateError(SandboxError):
    """A template's root filesystem is missing, unusable, or could not be built."""


class ImageError(TemplateError):
    """An image could not be pulled or unpacked: a malformed reference, a registry that refused
    or could not be reached, a blob whose digest is not the one named, a layer entry that would
    leave its directory."""


class CopyFailed(TemplateError):
    """A template build's COPY step cannot be done as asked: its source is not among the files
    uploaded for it, or its destination cannot be made (a file where a directory must be)."""


class BadUpload(SandboxError):
    """A build-context upload refused as sent: a malformed files hash, a body that is not a tar
    (plain or gzip) or ends before its Content-Length, an entry that would leave the context."""


class LengthRequired(BadUpload):
    """An upload without a Content-Length: its size must be known before reading it."""


class UploadTooLarge(BadUpload):
    """An upload over the limit: its Content-Length, what it sent, or its unpacked tar."""


class DiskFull(SandboxError):
    """A sandbox's files could not be kept as a layer (a pause, a snapshot, a fork): the state
    disk is full, or the layers would pass serve's storage quota. The sandbox is as it was."""


class StorageFull(UploadTooLarge):
    """What uploads and build layers hold would pass serve's build storage quota: an upload
    is refused with it (413), a build step fails with it."""


class BootError(SandboxError):
    """A sandbox did not come up (nspawn exited, no leader, envd never answered or never took
    its /init); everything the boot made has been removed again."""


class NoNodeAvailable(BootError):
    """No node of the cluster took the create (none alive with room, or each one tried
    refused it within the create's deadline); the message says which and why."""


class NodeLost(SandboxError):
    """The sandbox's node stopped renewing its lease, or does not answer: the sandbox cannot
    be reached through the cluster until the node returns."""

    def __init__(self, sandbox_id: str, node_id: str, why: str = "whose lease expired") -> None:
        super().__init__(f"sandbox {sandbox_id} is on node {node_id}, {why}: the sandbox "
                         f"cannot be reached until the node returns")  # fmt: skip


class BuildNodeLost(SandboxError):
    """The node agent a cluster's build was handed to stopped renewing its lease, or does not
    answer: the build cannot go on there (request it again)."""

    def __init__(self, build_id: str, node_id: str, why: str = "whose lease expired") -> None:
        super().__init__(f"build {build_id} runs on node {node_id}, {why}")


class VolumeNodeUnavailable(SandboxError):
    """A cluster's volume is on a node that cannot take the request now (its lease expired, it
    does not answer, or, for a new sandbox mounting it, it is draining): the message names the
    volume and the node. Trying again once the node is back may work."""


class HostError(SandboxError):
    """The host lacks something the runtime needs (root, cgroup2, systemd-nspawn, overlayfs)."""


class NodeDraining(SandboxError):
    """A node agent being drained (`sandboxd node drain`) takes no new sandboxes; the ones it
    runs go on. Another node may take the create."""


class NotMovable(WrongState):
    """A paused sandbox that cannot be resumed on another node than its own: paused with its
    memory, mounting volumes that stay on their node, or paused on a node that shares no
    registry; the message says which."""


class NodeUnreachable(SandboxError):
    """A node agent's internal API could not be reached, or did not answer as that API does
    (sandboxd.node.remote): what became of the operation there is unknown."""


class StoreUnavailable(SandboxError):
    """The store's database server cannot be reached (a PostgreSQL store: down, restarting, or
    refusing the credentials); nothing of the read or write that met it took effect. Trying
    again may work."""


class TeardownError(SandboxError):
    """Killing a sandbox left something behind (a busy mount, a cgroup that would not empty);
    the message names what."""


class CommandError(SandboxError):
    """A command sandboxd runs in a sandbox through envd (a build step, a template's start or
    ready command) could not be run to its end: envd refused it (an unknown user, a missing
    working directory; envd's Connect code and message in the text) or its stream broke off.
    A command that ran and failed is an exit code, not this."""


class CommandTimedOut(CommandError):
    """The command was still running at its deadline; envd killed it."""


class NotReady(CommandError):
    """A template's ready command did not succeed within its time; the message has the last
    attempt's exit code and output."""


class RegistryError(SandboxError):
    """The layer registry (serve's --registry) could not be reached, refused a push or a pull,
    or has no such layer: the operation that needed it did not happen."""
