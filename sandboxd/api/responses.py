"""The JSON shapes the control API answers with (field names and presence as the reference's
OpenAPI spec and the SDKs read them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxd.api.errors import status_of
from sandboxd.errors import SandboxError
from sandboxd.ids import rfc3339

if TYPE_CHECKING:
    from sandboxd.node.models import SandboxInfo
    from sandboxd.store.rows import BuildRow, TemplateRow

# The reference's constant for the deprecated clientID (infra: utils/split.go).
CLIENT_ID = "6532622b"


def sandbox(s: SandboxInfo, domain: str) -> dict[str, Any]:
    """`Sandbox` (create, connect, resume). `domain` is serve's: the SDKs' `get_host()` builds
    `{port}-{id}.{domain}` from it, whatever their own E2B_DOMAIN (E2B's `e2b.app` by default)."""
    out: dict[str, Any] = {
        "templateID": s.template_id,
        "sandboxID": s.sandbox_id,
        "clientID": CLIENT_ID,
        "envdVersion": s.envd_version,
    }
    if s.alias is not None:
        out["alias"] = s.alias
    if s.envd_token is not None:
        out["envdAccessToken"] = s.envd_token
    if s.traffic_token is not None:
        out["trafficAccessToken"] = s.traffic_token
    out["domain"] = domain
    return out


def fork_result(child: SandboxInfo | SandboxError, domain: str) -> dict[str, Any]:
    """`SandboxForkResult`: a child as a create returns it, or why it did not start."""
    if isinstance(child, SandboxError):
        return {"error": {"code": status_of(child), "message": str(child)}}
    return {"sandbox": sandbox(child, domain)}


def listed(s: SandboxInfo) -> dict[str, Any]:
    """`ListedSandbox` (lists)."""
    out: dict[str, Any] = {
        "templateID": s.template_id,
        "sandboxID": s.sandbox_id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(s.started_at),
        "endAt": rfc3339(s.end_at),
        "cpuCount": s.cpu_count,
        "memoryMB": s.memory_mb,
        "diskSizeMB": s.disk_size_mb,
        "state": s.state,
        "envdVersion": s.envd_version,
        "metadata": s.metadata,
    }
    if s.alias is not None:
        out["alias"] = s.alias
    if s.pause_mode is not None:
        out["pauseMode"] = s.pause_mode
    out["volumeMounts"] = s.options.get("volumeMounts", [])
    return out


def detail(s: SandboxInfo, domain: str) -> dict[str, Any]:
    """`SandboxDetail` (GET /sandboxes/{id})."""
    options = s.options
    out = listed(s)
    if s.envd_token is not None:
        out["envdAccessToken"] = s.envd_token
    out["allowInternetAccess"] = options.get("allow_internet_access")
    out["domain"] = domain
    if "network" in options:
        network = dict(options["network"])
        if isinstance(network.get("egressProxy"), dict):
            network["egressProxy"] = {
                k: v for k, v in network["egressProxy"].items() if k != "password"
            }
        out["network"] = network
    auto_resume = options.get("autoResume") or {}
    out["lifecycle"] = {
        "autoResume": bool(auto_resume.get("enabled")),
        "onTimeout": "pause" if s.auto_pause else "kill",
    }
    return out


def template(t: TemplateRow) -> dict[str, Any]:
    """`Template` (lists, POST /v2/templates)."""
    aliases = [t.alias] if t.alias else []
    return {
        "templateID": t.template_id,
        "buildID": t.build_id,
        "cpuCount": t.cpu_count,
        "memoryMB": t.memory_mb,
        "diskSizeMB": t.disk_size_mb,
        "public": t.public,
        "aliases": aliases,
        "names": aliases,
        "createdAt": rfc3339(t.created_at),
        "updatedAt": rfc3339(t.updated_at),
        "createdBy": None,
        "lastSpawnedAt": None if t.last_spawned_at is None else rfc3339(t.last_spawned_at),
        "spawnCount": t.spawn_count,
        "buildCount": t.build_count,
        "envdVersion": t.envd_version,
        "buildStatus": t.build_status,
    }


def template_detail(t: TemplateRow, builds: list[BuildRow]) -> dict[str, Any]:
    """GET /templates/{id}: the template with its builds (newest first); one made of the
    record for a template without any (base, `POST /v2/templates`)."""
    whole = template(t)
    listed = [
        {
            "buildID": b.build_id,
            "status": b.status,
            "createdAt": rfc3339(b.created_at),
            "updatedAt": rfc3339(b.updated_at),
            "cpuCount": b.cpu_count,
            "memoryMB": b.memory_mb,
            "diskSizeMB": b.disk_size_mb,
            "envdVersion": t.envd_version,
        }
        | ({"finishedAt": rfc3339(b.finished_at)} if b.finished_at is not None else {})
        for b in reversed(builds)
    ]
    if not listed:
        listed = [{
            "buildID": t.build_id,
            "status": t.build_status,
            "createdAt": whole["updatedAt"],
            "updatedAt": whole["updatedAt"],
            "finishedAt": whole["updatedAt"],
            "cpuCount": t.cpu_count,
            "memoryMB": t.memory_mb,
            "diskSizeMB": t.disk_size_mb,
            "envdVersion": t.envd_version,
        }]  # fmt: skip
    keys = ("templateID", "public", "aliases", "names", "createdAt", "updatedAt",
            "lastSpawnedAt", "spawnCount")  # fmt: skip
    return {**{k: whole[k] for k in keys}, "builds": listed}
