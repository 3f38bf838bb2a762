"""``GET /v1/usage``: what the answered requests used, summed per group.

Query parameters: ``group_by`` (``key``, ``model``, ``kind``, ``day``, several
comma-separated or repeated; none: one total), ``start`` and ``end`` (Unix seconds
or ISO 8601 dates and times; a date as ``end`` includes that day; default: the last
30 days), and the filters ``key``, ``model`` and ``kind``. An admin (an admin key,
or any caller of a gateway without keys) reads every app's rows; any other key
reads its own app's only, whatever ``key`` it names.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.usage.query import GROUPS, UsageQuery, summarize
from mlx_gateway.supervisor.usage.times import DAY, parse_time

DEFAULT_DAYS = 30


class UsageOff(GatewayError):
    status = 404
    type = "invalid_request_error"


async def get_usage(request: Request) -> Response:
    store = gateway_of(request).recorder.usage
    if store is None:
        raise UsageOff(
            "Usage is not recorded on this gateway: set server.usage: true in its config.",
            code="usage_off",
        )
    query = usage_query(request)
    await store.flush()  # what was answered before this request is counted
    data = await store.read(lambda conn: summarize(conn, query))
    body: dict[str, Any] = {
        "object": "usage",
        "start": query.start,
        "end": query.end,
        "group_by": list(query.group_by),
        "data": data,
    }
    return JSONResponse(body)


def is_admin(request: Request) -> bool:
    """Whether the caller reads every app's usage: an admin key, or no keys at all."""
    if caller_of(request.scope).role == "admin":
        return True
    server = gateway_of(request).config.server
    return not (server.api_keys or server.admin_keys or getattr(server, "keys", None))


def usage_query(request: Request) -> UsageQuery:
    params = request.query_params
    groups: list[str] = []
    for value in params.getlist("group_by"):
        groups += [g.strip() for g in value.split(",") if g.strip()]
    for name in groups:
        if name not in GROUPS:
            raise BadRequest(
                f"group_by {name!r} is not one of {', '.join(GROUPS)}.", param="group_by"
            )
    now = time.time()
    end = _time(params.get("end"), "end", now)
    start = _time(params.get("start"), "start", end - DEFAULT_DAYS * DAY)
    key = params.get("key")
    if not is_admin(request):
        key = caller_of(request.scope).name
    return UsageQuery(
        start=start,
        end=end,
        group_by=tuple(dict.fromkeys(groups)),
        key=key,
        model=params.get("model"),
        kind=params.get("kind"),
    )


def _time(value: str | None, param: str, default: float) -> float:
    if value is None or not value.strip():
        return default
    try:
        return parse_time(value, end=param == "end")
    except ValueError as exc:
        raise BadRequest(f"{param}: {exc}", param=param) from None
