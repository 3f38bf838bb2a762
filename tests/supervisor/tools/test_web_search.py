"""web_search against a SearXNG-shaped endpoint served by the test (real sockets on
127.0.0.1), its domain filters and failures; ddgs only as far as its failure offline."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mlx_gateway.supervisor.tools.web_search import SearchFailed, SearchHit, search


def result(url: str, title: str = "", content: str = "", date: str | None = None) -> dict:
    """One entry of SearXNG's ``results``, with the fields it sends besides ours."""
    parsed = urllib.parse.urlsplit(url)
    return {
        "url": url,
        "title": title or url,
        "content": content,
        "publishedDate": date,
        "engine": "duckduckgo",
        "engines": ["duckduckgo", "brave"],
        "parsed_url": [*list(parsed), ""],
        "template": "default.html",
        "positions": [1],
        "score": 2.0,
        "category": "general",
        "thumbnail": "",
    }


RESULTS = [
    result("https://docs.python.org/3/library/asyncio.html", "asyncio", "Asynchronous I/O."),
    result("https://www.example.com/a", "Example A", "About A.", "2025-04-30T00:00:00"),
    result("https://blog.example.com/post", "Example blog", "A post."),
    result("https://notexample.com/b", "Not example", "Lookalike."),
    result("https://example.org/c", "Example org", "Other TLD."),
    result("https://docs.python.org/3/library/asyncio.html", "asyncio (again)", "Duplicate."),
    {"title": "an infobox-like entry without a URL"},
]


class SearxServer:
    """``/search?q=…&format=json`` in SearXNG's shape; ``status``/``body``/``delay``
    change the answer; ``queries`` records what was asked."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes | None = None
        self.delay = 0.0
        self.queries: list[dict[str, list[str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parts.query)
                server.queries.append(query)
                time.sleep(server.delay)  # not a wait: the slow server a test asks for
                if not parts.path.endswith("/search"):
                    return self.send(404, b"not found")
                if query.get("format") != ["json"]:
                    return self.send(200, b"<html>results page</html>", "text/html")
                body = (
                    server.body
                    or json.dumps(
                        {
                            "query": query["q"][0],
                            "number_of_results": 0,
                            "results": RESULTS,
                            "answers": [],
                            "corrections": [],
                            "infoboxes": [],
                            "suggestions": [],
                            "unresponsive_engines": [["google", "timeout"]],
                        }
                    ).encode()
                )
                self.send(server.status, body, "application/json")

            def send(self, status: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def searx() -> Iterator[SearxServer]:
    server = SearxServer()
    yield server
    server.close()


async def test_searxng_hits(searx: SearxServer) -> None:
    hits = await search("python asyncio", searxng_url=searx.url)
    assert searx.queries == [{"q": ["python asyncio"], "format": ["json"]}]
    assert hits[:2] == [
        SearchHit(
            "https://docs.python.org/3/library/asyncio.html", "asyncio", "Asynchronous I/O.", None
        ),
        SearchHit("https://www.example.com/a", "Example A", "About A.", "2025-04-30T00:00:00"),
    ]
    assert len(hits) == 5  # max_results; the duplicate URL and the entry without one skipped
    assert [hit.url for hit in hits].count(hits[0].url) == 1
    assert len(await search("python", searxng_url=searx.url, max_results=2)) == 2


async def test_searxng_under_a_path(searx: SearxServer) -> None:
    hits = await search("x", searxng_url=searx.url + "/searxng/")
    assert hits and searx.queries[0]["q"] == ["x"]


async def test_allowed_domains_keep_subdomains_only(searx: SearxServer) -> None:
    hits = await search("example", searxng_url=searx.url, allowed_domains=["example.com"])
    assert [hit.url for hit in hits] == [
        "https://www.example.com/a",
        "https://blog.example.com/post",
    ]
    assert searx.queries[-1]["q"] == ["example site:example.com"]
    hits = await search(
        "example",
        searxng_url=searx.url,
        allowed_domains=["https://Example.COM/", "example.org"],
    )
    assert {hit.url for hit in hits} == {
        "https://www.example.com/a",
        "https://blog.example.com/post",
        "https://example.org/c",
    }
    assert searx.queries[-1]["q"] == ["example (site:example.com OR site:example.org)"]
    # a path prefix
    hits = await search("example", searxng_url=searx.url, allowed_domains=["example.com/a"])
    assert [hit.url for hit in hits] == ["https://www.example.com/a"]


async def test_blocked_domains(searx: SearxServer) -> None:
    hits = await search(
        "example", searxng_url=searx.url, blocked_domains=["example.com", "python.org"]
    )
    assert [hit.url for hit in hits] == ["https://notexample.com/b", "https://example.org/c"]
    assert searx.queries[-1]["q"] == ["example -site:example.com -site:python.org"]
    hits = await search(
        "example",
        searxng_url=searx.url,
        allowed_domains=["example.com"],
        blocked_domains=["blog.example.com"],
    )
    assert [hit.url for hit in hits] == ["https://www.example.com/a"]


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (403, b"Forbidden", "search.formats: [html, json]"),
        (500, b"oops", "HTTP 500"),
        (429, b"slow down", "rate limiting"),
        (200, b"<html>not json</html>", "SearXNG's JSON shape"),
        (200, b'{"results": {"no": "list"}}', "SearXNG's JSON shape"),
    ],
)
async def test_searxng_failures(searx: SearxServer, status: int, body: bytes, words: str) -> None:
    searx.status, searx.body = status, body
    with pytest.raises(SearchFailed) as caught:
        await search("q", searxng_url=searx.url)
    assert words in caught.value.message and searx.url in caught.value.message


async def test_searxng_timeout_and_unreachable(searx: SearxServer) -> None:
    searx.delay = 2.0
    start = time.monotonic()
    with pytest.raises(SearchFailed) as caught:
        await search("q", searxng_url=searx.url, timeout=0.3)
    assert time.monotonic() - start < 1.5
    assert "within 0.3 s" in caught.value.message
    gone = SearxServer()
    gone.close()
    with pytest.raises(SearchFailed) as caught:
        await search("q", searxng_url=gone.url)
    assert "could not be reached" in caught.value.message


async def test_bad_queries() -> None:
    with pytest.raises(SearchFailed) as caught:
        await search("   ", searxng_url="http://unused.invalid")
    assert caught.value.code == "invalid_input"
    with pytest.raises(SearchFailed) as caught:
        await search("word " * 200, searxng_url="http://unused.invalid")
    assert caught.value.code == "query_too_long"


async def test_ddgs_without_network_fails_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every engine's request goes to a proxy that is not there: no network is used
    monkeypatch.setenv("DDGS_PROXY", "http://127.0.0.1:9")
    start = time.monotonic()
    with pytest.raises(SearchFailed) as caught:
        await search("mlx gateway", searxng_url=None, timeout=3)
    assert time.monotonic() - start < 4
    assert caught.value.message.startswith("Web search failed")


async def test_a_hung_ddgs_is_abandoned_at_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import ddgs

    def hang(self: Any, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        time.sleep(1.5)  # not a wait: the hung search engine
        return [{"href": "https://late.example.com", "title": "late", "body": ""}]

    monkeypatch.setattr(ddgs.DDGS, "text", hang)
    start = time.monotonic()
    with pytest.raises(SearchFailed) as caught:
        await search("q", searxng_url=None, timeout=0.3)
    assert time.monotonic() - start < 1.0
    assert "within 0.3 s" in caught.value.message


async def test_ddgs_results_are_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    import ddgs

    asked: list[tuple[str, dict[str, Any]]] = []

    def text(self: Any, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        asked.append((query, kwargs))
        return [
            {"title": "A", "href": "https://a.example.com/x", "body": "Snippet A."},
            {"title": "B", "href": "https://b.example.net/y", "body": "Snippet B."},
        ]

    monkeypatch.setattr(ddgs.DDGS, "text", text)
    hits = await search("q", searxng_url=None, allowed_domains=["example.com"], max_results=2)
    assert hits == [SearchHit("https://a.example.com/x", "A", "Snippet A.", None)]
    assert asked == [("q site:example.com", {"max_results": 6})]
