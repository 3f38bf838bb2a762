"""The ``web_search`` tool: a query in, a few hits (url, title, snippet, age) out.

Two engines: a SearXNG instance when the configuration names one (``searxng_url``,
asked at ``{searxng_url}/search?q=…&format=json``; the admin wrote that URL, so it is
trusted and may be on the local network), else the ``ddgs`` metasearch library, which
is synchronous and runs in a thread of its own under the same timeout.

Domain filters: a hit is kept when its host is an allowed domain or a subdomain of one
(``example.com`` allows ``docs.example.com``; an entry may add a path prefix,
``example.com/blog``), and dropped when it matches a blocked one. The filters are also
written into the query in ``site:`` syntax, which most engines honour, so that the
engine returns hits from the allowed domains in the first place.

Any failure (no answer, an HTTP error, a malformed answer, the timeout) raises
:class:`SearchFailed` with a message saying what went wrong; no hits is not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from mlx_gateway.supervisor.errors import GatewayError

USER_AGENT = "mlx-gateway (web search)"
MAX_QUERY_CHARS = 400
"""Longer queries are refused (Anthropic's ``query_too_long``)."""

T = TypeVar("T")


@dataclass(frozen=True)
class SearchHit:
    url: str
    title: str
    snippet: str
    page_age: str | None = None
    """When the page was published, as the engine gave it (SearXNG: ISO 8601), if known."""


class SearchFailed(GatewayError):
    """A search that did not run; the tool loop reports it as a failed call."""

    status = 502
    type = "server_error"

    def __init__(self, message: str, *, code: str = "unavailable") -> None:
        super().__init__(message, code=code)


async def search(
    query: str,
    *,
    searxng_url: str | None,
    max_results: int = 5,
    allowed_domains: Sequence[str] = (),
    blocked_domains: Sequence[str] = (),
    timeout: float = 10,
) -> list[SearchHit]:
    """At most ``max_results`` hits for ``query`` (see the module docstring)."""
    query = " ".join(query.split())
    if not query:
        raise SearchFailed("The search query is empty.", code="invalid_input")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchFailed(
            f"The search query is too long ({len(query)} characters, at most {MAX_QUERY_CHARS}).",
            code="query_too_long",
        )
    allowed = [d for d in map(_domain, allowed_domains) if d[0]]
    blocked = [d for d in map(_domain, blocked_domains) if d[0]]
    asked = query + _site_terms(allowed, blocked)
    # ask for more when hits may be filtered out afterwards
    wanted = max_results * 3 if allowed or blocked else max_results
    if searxng_url:
        hits = await _searxng(searxng_url, asked, timeout)
    else:
        hits = await _ddgs(asked, wanted, timeout)
    kept: list[SearchHit] = []
    seen: set[str] = set()
    for hit in hits:
        if hit.url in seen or not _passes(hit.url, allowed, blocked):
            continue
        seen.add(hit.url)
        kept.append(hit)
        if len(kept) >= max_results:
            break
    return kept


# ---------------------------------------------------------------- domain filters

Domain = tuple[str, str]
"""A filter entry as (host, path prefix)."""


def _domain(entry: str) -> Domain:
    entry = entry.strip()
    parts = urllib.parse.urlsplit(entry if "://" in entry else "//" + entry)
    host = (parts.hostname or "").lower().rstrip(".")
    return host, parts.path.rstrip("/")


def _passes(url: str, allowed: list[Domain], blocked: list[Domain]) -> bool:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        return False
    host = (parts.hostname or "").lower().rstrip(".")
    if any(_matches(host, parts.path, d) for d in blocked):
        return False
    return not allowed or any(_matches(host, parts.path, d) for d in allowed)


def _matches(host: str, path: str, domain: Domain) -> bool:
    name, prefix = domain
    if host != name and not host.endswith("." + name):
        return False
    return not prefix or path == prefix or path.startswith(prefix + "/")


def _site_terms(allowed: list[Domain], blocked: list[Domain]) -> str:
    terms = ""
    sites = [f"site:{host}" for host, _ in allowed]
    if len(sites) == 1:
        terms += " " + sites[0]
    elif sites:
        terms += " (" + " OR ".join(sites) + ")"
    if not allowed:  # an allow list already keeps blocked domains out unless nested
        terms += "".join(f" -site:{host}" for host, _ in blocked)
    return terms


# ---------------------------------------------------------------- SearXNG


async def _searxng(base_url: str, query: str, timeout: float) -> list[SearchHit]:
    endpoint = base_url.rstrip("/") + "/search"
    where = f"the SearXNG instance at {base_url}"
    try:
        async with httpx.AsyncClient(
            timeout=timeout, headers={"User-Agent": USER_AGENT, "Accept": "application/json"}
        ) as client:
            async with asyncio.timeout(timeout):
                response = await client.get(endpoint, params={"q": query, "format": "json"})
    except TimeoutError:
        raise SearchFailed(
            f"Web search failed: {where} did not answer within {timeout:g} s."
        ) from None
    except httpx.HTTPError as exc:
        raise SearchFailed(
            f"Web search failed: {where} could not be reached ({exc or type(exc).__name__})."
        ) from None
    if response.status_code == 403:
        raise SearchFailed(
            f"Web search failed: {where} refused the JSON format (HTTP 403). Enable it in "
            "the instance's settings.yml: search.formats: [html, json]."
        )
    if response.status_code == 429:
        raise SearchFailed(
            f"Web search failed: {where} is rate limiting (HTTP 429).", code="too_many_requests"
        )
    if response.status_code != 200:
        raise SearchFailed(f"Web search failed: {where} answered HTTP {response.status_code}.")
    try:
        body = response.json()
        results = body["results"]
        if not isinstance(results, list):
            raise TypeError("results is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise SearchFailed(
            f"Web search failed: {where} did not answer in SearXNG's JSON shape ({exc})."
        ) from None
    hits = []
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("url"), str):
            continue
        published = result.get("publishedDate")
        hits.append(
            SearchHit(
                url=result["url"],
                title=str(result.get("title") or result["url"]),
                snippet=str(result.get("content") or ""),
                page_age=str(published) if published else None,
            )
        )
    return hits


# ---------------------------------------------------------------- ddgs


async def _ddgs(query: str, max_results: int, timeout: float) -> list[SearchHit]:
    def run() -> list[dict[str, Any]]:
        from ddgs import DDGS  # imported on first use: it loads its engines' modules
        from ddgs.exceptions import DDGSException

        try:
            return DDGS(timeout=max(1, math.ceil(timeout))).text(query, max_results=max_results)
        except DDGSException as exc:
            if str(exc) == "No results found.":
                return []
            raise

    try:
        results = await _in_thread(run, timeout)
    except TimeoutError:
        raise SearchFailed(
            f"Web search failed: the search engines did not answer within {timeout:g} s."
        ) from None
    except Exception as exc:
        why = str(exc) or type(exc).__name__
        raise SearchFailed(
            f"Web search failed: the search engines could not be reached ({why})."
        ) from None
    return [
        SearchHit(
            url=str(result["href"]),
            title=str(result.get("title") or result["href"]),
            snippet=str(result.get("body") or ""),
            page_age=str(result["date"]) if result.get("date") else None,
        )
        for result in results
        if isinstance(result.get("href"), str)
    ]


async def _in_thread(work: Callable[[], T], timeout: float) -> T:
    """``work()`` in a daemon thread of its own, awaited for at most ``timeout`` s.

    Not the loop's default executor: a search that outlives its timeout is left to
    end by itself, and must not hold up the loop's shutdown, which joins that pool."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = work()
        except BaseException as exc:
            _call_soon(loop, settle, None, exc)
        else:
            _call_soon(loop, settle, result, None)

    threading.Thread(target=target, name="web-search", daemon=True).start()
    async with asyncio.timeout(timeout):
        return await future


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed while the search ran
        loop.call_soon_threadsafe(callback, *args)
