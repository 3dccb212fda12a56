"""`GET /sandboxes/{id}/metrics` (the node's samples of one sandbox) and `GET
/teams/{id}/metrics` (the store's gauges of all), grouped into buckets whose width grows with
the range asked for (the reference's ClickHouse queries: max per bucket, ascending)."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sandboxd.api import params
from sandboxd.api.context import context
from sandboxd.api.errors import RequestError
from sandboxd.api.teams import team_of
from sandboxd.ids import rfc3339

if TYPE_CHECKING:
    from starlette.requests import Request

    from sandboxd.store.interface import Store
    from sandboxd.store.rows import MetricSample

# (range shorter than, step), in seconds (infra: clickhouse/pkg/utils/step.go).
STEPS = ((3600, 5), (6 * 3600, 30), (12 * 3600, 60), (24 * 3600, 120), (7 * 86400, 300))
LONGEST_STEP = 900
TEAM_DEFAULT_RANGE_S = 7 * 86400
UNIX_S_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z: the last second RFC 3339 can write
# `/metrics/max`'s metrics, and their fields in the team's metrics.
MAX_METRICS = {"concurrent_sandboxes": "concurrentSandboxes",
               "sandbox_start_rate": "sandboxStartRate"}  # fmt: skip


async def sandbox(request: Request) -> Response:
    """The team's sandbox's samples; none for an unknown or another team's sandbox."""
    sandbox_id = params.sandbox_id(request)
    start, end = _range(request)
    samples = await context(request).node.metrics(sandbox_id, start, end, team_of(request))
    return JSONResponse(sandbox_metrics(samples, start, end))


def _own_team(request: Request) -> str:
    """The path's team id, the caller's. Raises RequestError 403 (the reference's words)."""
    team_id = team_of(request)
    if request.path_params["team_id"] != team_id:
        raise RequestError(403, f"You (team {team_id}) don't have access to this team")
    return team_id


async def team(request: Request) -> Response:
    team_id = _own_team(request)
    start, end = _range(request)
    return JSONResponse(team_metrics(context(request).store, team_id, start, end))


async def team_max(request: Request) -> Response:
    """`MaxTeamMetric`: the most of `metric` in one bucket of the range, and when (the latest
    bucket of it; 0s for a range without data)."""
    team_id = _own_team(request)
    metric = request.query_params.get("metric")
    if metric not in MAX_METRICS:
        raise RequestError(400, f"validation error: metric: {metric!r} is not one of "
                                f"{', '.join(MAX_METRICS)}")  # fmt: skip
    start, end = _range(request)
    points = team_metrics(context(request).store, team_id, start, end)
    field = MAX_METRICS[metric]
    best = max(points, key=lambda p: (p[field], p["timestampUnix"]), default=None)
    if best is None:
        return JSONResponse({**_stamp(0), "value": 0})
    return JSONResponse({**_stamp(best["timestampUnix"]), "value": best[field]})


def routes() -> list[Route]:
    return [
        Route("/sandboxes/{sandbox_id}/metrics", sandbox, methods=["GET"]),
        Route("/teams/{team_id}/metrics", team, methods=["GET"]),
        Route("/teams/{team_id}/metrics/max", team_max, methods=["GET"]),
    ]


def _range(request: Request) -> tuple[int | None, int | None]:
    start = params.query_int(request, "start", 0, UNIX_S_MAX)
    end = params.query_int(request, "end", 0, UNIX_S_MAX)
    if start is not None and end is not None and start > end:
        raise RequestError(400, "Invalid time range for metrics")
    return start, end


def step_for(range_s: int) -> int:
    for shorter_than, step in STEPS:
        if range_s < shorter_than:
            return step
    return LONGEST_STEP


def _stamp(bucket: int) -> dict[str, Any]:
    return {"timestamp": rfc3339(bucket * 1_000_000), "timestampUnix": bucket}


def sandbox_metrics(
    samples: list[MetricSample], start: int | None, end: int | None
) -> list[dict[str, Any]]:
    """`samples` (oldest first) in [start, end] (None: the first or last sample), max per
    bucket."""
    if not samples:
        return []
    first = samples[0].ts if start is None else start
    last = samples[-1].ts if end is None else end
    step = step_for(last - first)
    buckets: dict[int, MetricSample] = {}
    for s in samples:
        bucket = s.ts // step * step
        held = buckets.get(bucket)
        buckets[bucket] = s if held is None else _max(held, s)
    return [
        {
            **_stamp(bucket),
            "cpuCount": s.cpu_count,
            "cpuUsedPct": s.cpu_used_pct,
            "memUsed": s.mem_used,
            "memTotal": s.mem_total,
            "memCache": s.mem_cache,
            "diskUsed": s.disk_used,
            "diskTotal": s.disk_total,
        }
        for bucket, s in sorted(buckets.items())
    ]


def _max(a: MetricSample, b: MetricSample) -> MetricSample:
    pairs = zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    return type(a)(*(max(x, y) for x, y in pairs))


def team_metrics(
    store: Store, team_id: str, start: int | None, end: int | None
) -> list[dict[str, Any]]:
    """Per bucket with data: the most of the team's sandboxes running at once, and their
    starts per second."""
    end = int(time.time()) if end is None else end
    start = end - TEAM_DEFAULT_RANGE_S if start is None else start
    step = step_for(end - start)
    running: dict[int, int] = {}
    for ts, count in store.team_samples(start, end, team_id):
        bucket = ts // step * step
        running[bucket] = max(running.get(bucket, 0), count)
    starts: dict[int, int] = {}
    window = start * 1_000_000, end * 1_000_000 + 999_999
    for at_us in store.event_times("created", *window, team_id):
        bucket = at_us // 1_000_000 // step * step
        starts[bucket] = starts.get(bucket, 0) + 1
    return [
        {
            **_stamp(bucket),
            "concurrentSandboxes": running.get(bucket, 0),
            "sandboxStartRate": starts.get(bucket, 0) / step,
        }
        for bucket in sorted(running.keys() | starts.keys())
    ]
