"""FilesystemService: one short method per filesystem.Filesystem RPC. Error codes and messages
follow Go envd's internal/services/filesystem (one file per RPC there)."""

from __future__ import annotations

import os
import posixpath
import stat
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

from anyio import to_thread
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from envd._gen.filesystem.filesystem_connect import Filesystem
from envd._gen.filesystem.filesystem_pb import (
    CreateWatcherResponse,
    GetWatcherEventsResponse,
    MakeDirResponse,
    MoveResponse,
    RemoveResponse,
    RemoveWatcherResponse,
    StatResponse,
)
from envd.errors import os_errors
from envd.filesystem import entries, listing, listing_codecs
from envd.filesystem.legacy import LEGACY_USER_AGENT
from envd.filesystem.polling import PollingWatchers, WatcherNotFoundError
from envd.filesystem.remove import ProtectedPathError, check_removable, remove_tree
from envd.filesystem.watch_stream import closing_on_exit, watch_events
from envd.filesystem.watcher import (
    InotifyLimitError,
    NetworkMountError,
    WatcherFailedError,
    WatchPathNotADirectoryError,
    WatchPathNotFoundError,
    WatchSetupError,
    open_watcher,
)
from envd.keepalive import keepalive_interval
from envd.users import UnknownCallerError, ensure_dirs, expand_path

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from connectrpc.request import RequestContext

    from envd._gen.filesystem.filesystem_pb import (
        CreateWatcherRequest,
        GetWatcherEventsRequest,
        ListDirRequest,
        ListDirResponse,
        MakeDirRequest,
        MoveRequest,
        RemoveRequest,
        RemoveWatcherRequest,
        StatRequest,
        WatchDirRequest,
        WatchDirResponse,
    )
    from envd.filesystem.watcher import DirWatcher
    from envd.state import SandboxState
    from envd.users import User, UserCache

# Built once: Stat is the hot path.
_STAT_ERRORS: Final = os_errors("error getting file info", ENOENT="file not found")


class FilesystemService(Filesystem):
    # The domain errors of these RPCs and their codes (as Go envd answers them), applied by
    # the app's ErrorMappingInterceptor; their messages are the reference's.
    ERROR_CODES: ClassVar[Mapping[type[Exception], Code]] = {
        UnknownCallerError: Code.UNAUTHENTICATED,
        entries.RootNotADirectoryError: Code.INVALID_ARGUMENT,
        ProtectedPathError: Code.INVALID_ARGUMENT,
        WatchPathNotFoundError: Code.NOT_FOUND,
        WatchPathNotADirectoryError: Code.INVALID_ARGUMENT,
        NetworkMountError: Code.INVALID_ARGUMENT,
        InotifyLimitError: Code.RESOURCE_EXHAUSTED,
        WatchSetupError: Code.INTERNAL,
        WatcherFailedError: Code.INTERNAL,
        WatcherNotFoundError: Code.NOT_FOUND,
    }

    def __init__(self, state: SandboxState, users: UserCache) -> None:
        self.state = state
        self._users = users
        self._streams: set[DirWatcher] = set()
        self._polling = PollingWatchers()

    async def shutdown(self) -> None:
        """End open WatchDir streams cleanly and drop polling watchers (daemon shutdown)."""
        for watcher in list(self._streams):
            watcher.close()
        self._polling.close_all()

    def _user(self, ctx: RequestContext[Any, Any]) -> User:
        return self._users.caller(ctx.request_headers.get("authorization"))

    @staticmethod
    def _refuse_empty(path: str, what: str) -> None:
        # The reference resolves "" to the default workdir or home and would move or delete
        # it; no client means that, so it is refused here (a deliberate difference).
        if not path:
            raise ConnectError(
                Code.INVALID_ARGUMENT,
                f"{what} is empty (it would mean the default workdir or the home directory)",
            )

    def _resolve(self, path: str, user: User) -> str:
        try:
            resolved = expand_path(path, user, self.state.default_workdir)
            resolved.encode("utf-8", "surrogateescape")  # lone surrogates from JSON escapes
        except (ValueError, UnicodeError) as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"invalid path {path!r}: {exc}") from None
        return resolved

    async def stat(
        self, request: StatRequest, ctx: RequestContext[StatRequest, StatResponse]
    ) -> StatResponse:
        path = self._resolve(request.path, self._user(ctx))
        try:  # not `with _STAT_ERRORS`: a bare try costs nothing on the hot path
            return StatResponse(entry=entries.entry_info(path))
        except OSError as exc:
            raise _STAT_ERRORS.connect_error(exc) from None

    async def make_dir(
        self, request: MakeDirRequest, ctx: RequestContext[MakeDirRequest, MakeDirResponse]
    ) -> MakeDirResponse:
        user = self._user(ctx)
        path = self._resolve(request.path, user)
        with os_errors("error getting file info"):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise ConnectError(Code.ALREADY_EXISTS, f"directory already exists: {path}")
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"path already exists but it is not a directory: {path}"
            )
        with os_errors("error creating directory", ENOENT=Code.INTERNAL):
            await to_thread.run_sync(ensure_dirs, path, user)
            return MakeDirResponse(entry=entries.entry_info(path))

    async def move(
        self, request: MoveRequest, ctx: RequestContext[MoveRequest, MoveResponse]
    ) -> MoveResponse:
        user = self._user(ctx)
        self._refuse_empty(request.source, "source path")
        self._refuse_empty(request.destination, "destination path")
        source = self._resolve(request.source, user)
        destination = self._resolve(request.destination, user)
        with os_errors("error creating destination dirs", ENOENT=Code.INTERNAL):
            await to_thread.run_sync(ensure_dirs, posixpath.dirname(destination), user)
        with os_errors("error renaming", ENOENT="source file not found"):
            os.rename(source, destination)
            return MoveResponse(entry=entries.entry_info(destination))

    async def list_dir(
        self, request: ListDirRequest, ctx: RequestContext[ListDirRequest, ListDirResponse]
    ) -> ListDirResponse:
        path = self._resolve(request.path, self._user(ctx))
        cycle = (Code.FAILED_PRECONDITION, f'cyclic symlink or chain >255 links at "{path}"')
        depth = request.depth or 1
        headers = ctx.request_headers
        codec = listing_codecs.wire_codec(headers)
        with os_errors(f"error reading directory {path}", ENOENT="path not found", ELOOP=cycle):
            if codec is None or headers.get("user-agent") == LEGACY_USER_AGENT:
                # gRPC-Web, or the legacy SDK, whose interceptor rebuilds the entries
                return await to_thread.run_sync(listing.list_dir, path, depth)
            gzip = listing_codecs.accepts_gzip(headers.get("accept-encoding", ""))
            encoded = await to_thread.run_sync(listing.encode_listing, path, depth, codec, gzip)
        # Bytes in place of the message: the service's ListingCodec and ListingGzip send them.
        return cast("ListDirResponse", encoded)

    async def remove(
        self, request: RemoveRequest, ctx: RequestContext[RemoveRequest, RemoveResponse]
    ) -> RemoveResponse:
        user = self._user(ctx)
        self._refuse_empty(request.path, "path")
        path = self._resolve(request.path, user)
        check_removable(path, user.home)
        with os_errors("error removing file or directory", ENOENT=Code.INTERNAL):
            await to_thread.run_sync(remove_tree, path)
        return RemoveResponse()

    async def watch_dir(
        self, request: WatchDirRequest, ctx: RequestContext[WatchDirRequest, WatchDirResponse]
    ) -> AsyncIterator[WatchDirResponse]:
        path = self._resolve(request.path, self._user(ctx))
        keepalive_s = keepalive_interval(ctx.request_headers)
        watcher = await open_watcher(path, request.recursive, request.allow_network_mounts)
        with closing_on_exit(watcher, self._streams):
            async for message in watch_events(watcher, request.include_entry, keepalive_s):
                yield message

    async def create_watcher(
        self,
        request: CreateWatcherRequest,
        ctx: RequestContext[CreateWatcherRequest, CreateWatcherResponse],
    ) -> CreateWatcherResponse:
        path = self._resolve(request.path, self._user(ctx))
        watcher = await open_watcher(path, request.recursive, request.allow_network_mounts)
        return CreateWatcherResponse(watcher_id=self._polling.add(watcher, request.include_entry))

    async def get_watcher_events(
        self,
        request: GetWatcherEventsRequest,
        ctx: RequestContext[GetWatcherEventsRequest, GetWatcherEventsResponse],
    ) -> GetWatcherEventsResponse:
        return GetWatcherEventsResponse(events=await self._polling.drain(request.watcher_id))

    async def remove_watcher(
        self,
        request: RemoveWatcherRequest,
        ctx: RequestContext[RemoveWatcherRequest, RemoveWatcherResponse],
    ) -> RemoveWatcherResponse:
        self._polling.remove(request.watcher_id)
        return RemoveWatcherResponse()
