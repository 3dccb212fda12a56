"""The volume-content API (E2B's `/volumecontent/{volumeID}/…`), served on sandboxd's port:
a volume's files read and written from outside any sandbox, with the bearer token its create
or get handed out (sandboxd.volumes.tokens), never the API key. Every path is confined to the
volume (sandboxd.volumes.tree). Errors are `{"code": "<reason>", "message"}`, the code a string
as the content API's schema has it. Bodies stream both ways: a download is read in chunks, an
upload is written as it arrives, neither held whole in memory."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import wraps
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sandboxd.api import params, volume_routes
from sandboxd.api.bodies import read_json
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError, status_of
from sandboxd.api.request_models import VolumeMetadata
from sandboxd.errors import SandboxError
from sandboxd.volumes import files
from sandboxd.volumes.tree import MAX_ID, Entry, Ownership, VolumeTree

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

    from sandboxd.api.context import VolumeFiles, Volumes
    from sandboxd.store.rows import VolumeRow
    from sandboxd.volumes.catalog import VolumeCatalog

PREFIX = "/volumecontent/"
CHUNK = 1 << 20  # what a download reads and an upload gathers per write
_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 409: "conflict",
          413: "too_large", 503: "unavailable", 507: "insufficient_storage"}  # fmt: skip
_TYPES = ((stat.S_ISDIR, "directory"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "symlink"))


def content_error(status: int, message: str) -> Response:
    return JSONResponse({"code": _CODES.get(status, "internal"), "message": message}, status)


# An endpoint of the content API, given the tree of the volume its request opened.
Endpoint = Callable[["Request", VolumeTree], Awaitable[Response]]
# How a request reaches its volume's tree: checked, then the endpoint run on the tree (or the
# request relayed to the node that holds the volume).
Reach = Callable[["Request", Endpoint], Awaitable[Response]]


def serving(endpoint: Endpoint, reach: Reach) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint` reached by `reach`, its refusals in the content API's error shape."""

    @wraps(endpoint)
    async def answer(request: Request) -> Response:
        try:
            return await reach(request, endpoint)
        except RequestError as exc:
            return content_error(exc.status, exc.message)
        except SandboxError as exc:
            return content_error(status_of(exc), str(exc))

    return answer


def _time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat().replace("+00:00", "Z")


def entry_json(e: Entry) -> dict[str, Any]:
    """E2B's VolumeEntryStat; `mode` the permission bits only."""
    mode = e.st.st_mode
    kind = next((name for test, name in _TYPES if test(mode)), "unknown")
    out: dict[str, Any] = {
        "name": e.name, "type": kind, "path": e.path, "size": e.st.st_size,
        "mode": stat.S_IMODE(mode), "uid": e.st.st_uid, "gid": e.st.st_gid,
        "atime": _time(e.st.st_atime_ns), "mtime": _time(e.st.st_mtime_ns),
        "ctime": _time(e.st.st_ctime_ns),
    }  # fmt: skip
    if e.target is not None:
        out["target"] = e.target
    return out


def checked(request: Request, volumes: Volumes) -> VolumeRow:
    """The path's volume, if the request's bearer token opens it.

    Raises:
        RequestError: 400 for an id that is not a UUID; 401 without a token that opens it.
        VolumeNotFound: no such volume.
    """
    volume_id = volume_routes.volume_id(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise RequestError(401, "Missing volume token (Authorization: Bearer <token>)")
    if not volumes.tokens.opens(token.strip(), volume_id):
        raise RequestError(401, "Invalid or expired volume token")
    return volumes.get(volume_id)


async def by_token(request: Request, endpoint: Endpoint) -> Response:
    """The control API's reach: the volume the token opens, its files where the context keeps
    them (serve's disk, or a gateway's relay to the volume's node).

    Raises:
        RequestError, VolumeNotFound: as `checked`.
    """
    ctx = context(request)
    volume = checked(request, ctx.volumes)
    return await ctx.files(request, volume, endpoint)


def on_disk(catalog: VolumeCatalog) -> VolumeFiles:
    """The files of `catalog`'s volumes, on this machine's disk."""

    async def files(request: Request, volume: VolumeRow, endpoint: Endpoint) -> Response:
        return await endpoint(request, VolumeTree(catalog.storage.mount_path(volume.volume_id)))

    return files


def trusted(catalog: VolumeCatalog) -> Reach:
    """A node agent's reach: a gateway checked the volume's token (the cluster token, which
    the node's API asks of every request, says a gateway sent it); the volume is this node's.

    Raises:
        RequestError: 400 for an id that is not a UUID. VolumeNotFound: not this node's.
    """
    files = on_disk(catalog)

    async def reach(request: Request, endpoint: Endpoint) -> Response:
        volume = catalog.get(volume_routes.volume_id(request))
        return await files(request, volume, endpoint)

    return reach


def path_of(request: Request) -> str:
    """Raises RequestError: 400 without a `path`."""
    path = request.query_params.get("path", "")
    if not path:
        raise RequestError(400, "validation error: path: required")
    return path


def flag(request: Request, name: str) -> bool:
    """Raises RequestError: 400 for a value other than true or false."""
    raw = request.query_params.get(name, "false")
    if raw not in ("true", "false"):
        raise RequestError(400, f"validation error: {name}: must be true or false")
    return raw == "true"


def ownership(request: Request) -> Ownership:
    """uid, gid and mode (decimal) from the query."""
    return Ownership(
        params.query_int(request, "uid", 0, MAX_ID),
        params.query_int(request, "gid", 0, MAX_ID),
        params.query_int(request, "mode", 0, 0o7777),
    )


async def get_entry(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    return JSONResponse(entry_json(await asyncio.to_thread(tree.stat, path)))


async def patch_entry(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    body = await read_json(request, VolumeMetadata)
    owner = Ownership(body.uid, body.gid, body.mode)
    return JSONResponse(entry_json(await asyncio.to_thread(tree.update, path, owner)))


async def delete_entry(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    await asyncio.to_thread(tree.remove, path)
    return Response(status_code=204)


async def list_dir(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    depth = params.query_int(request, "depth", -(2**31), 2**31) or 1
    found = await asyncio.to_thread(tree.list, path, depth)
    return JSONResponse([entry_json(e) for e in found])


async def make_dir(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    owner, force = ownership(request), flag(request, "force")
    made = await asyncio.to_thread(files.make_dir, tree, path, owner, force=force)
    return JSONResponse(entry_json(made), 201)


async def read_file(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    fd = await asyncio.to_thread(files.open_to_read, tree, path)
    return StreamingResponse(_chunks(fd), media_type="application/octet-stream")


async def _chunks(fd: int) -> AsyncIterator[bytes]:
    """The file's bytes, CHUNK at a time, read off the event loop; `fd` closed at the end (or
    when the client goes)."""
    try:
        while chunk := await asyncio.to_thread(_read, fd):
            yield chunk
    finally:
        os.close(fd)


def _read(fd: int) -> bytes:
    return os.read(fd, CHUNK)


async def write_file(request: Request, tree: VolumeTree) -> Response:
    path = path_of(request)
    owner, force = ownership(request), flag(request, "force")
    upload = await asyncio.to_thread(files.upload, tree, path, owner, force=force)
    try:
        pending = bytearray()
        async for chunk in request.stream():
            pending += chunk
            if len(pending) >= CHUNK:
                await asyncio.to_thread(upload.write, pending)
                pending = bytearray()
        await asyncio.to_thread(upload.write, pending)
    except ClientDisconnect:
        await asyncio.to_thread(upload.abort)
        return content_error(400, "the upload ended before its body did")
    except BaseException:
        await asyncio.to_thread(upload.abort)
        raise
    return JSONResponse(entry_json(await asyncio.to_thread(upload.finish)), 201)


def routes(prefix: str = PREFIX, reach: Reach = by_token) -> list[Route]:
    """The content API under `prefix`, each request reaching its volume by `reach`."""
    base = prefix + "{volume_id}"
    return [
        Route(f"{base}/path", serving(get_entry, reach), methods=["GET"]),
        Route(f"{base}/path", serving(patch_entry, reach), methods=["PATCH"]),
        Route(f"{base}/path", serving(delete_entry, reach), methods=["DELETE"]),
        Route(f"{base}/dir", serving(list_dir, reach), methods=["GET"]),
        Route(f"{base}/dir", serving(make_dir, reach), methods=["POST"]),
        Route(f"{base}/file", serving(read_file, reach), methods=["GET"]),
        Route(f"{base}/file", serving(write_file, reach), methods=["PUT"]),
    ]
