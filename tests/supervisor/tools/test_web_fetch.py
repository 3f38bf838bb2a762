"""web_fetch against local servers (real sockets on 127.0.0.1, so the fetches that
should succeed list the server in allow_private): the saved pages' main text without
their markup or boilerplate, the other types, the caps, redirects and the guard."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mlx_gateway.supervisor.tools.safety import UrlRefused, UrlUnreachable
from mlx_gateway.supervisor.tools.web_fetch import (
    MAX_REDIRECTS,
    UnsupportedContent,
    fetch,
    is_listed,
    urls_in,
)

PAGES = Path(__file__).resolve().parents[2] / "data" / "pages"
EXPECTED = json.loads((PAGES / "expected.json").read_text())


class PageServer:
    """Serves ``files`` (path → (content type, body)); ``/to/<quoted URL>`` redirects
    there; ``/chunked/<path>`` sends a file without a Content-Length; ``/slow/<path>``
    waits ``delay`` seconds first."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str | None, bytes]] = {}
        self.requests: list[str] = []
        self.delay = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.requests.append(self.path)
                path = self.path
                if path.startswith("/to/"):
                    return self.send(302, None, b"", {"Location": urllib.parse.unquote(path[4:])})
                if path.startswith("/slow/"):
                    time.sleep(server.delay)  # not a wait: the slow server a test asks for
                    path = path[5:]
                chunked = path.startswith("/chunked/")
                path = path[8:] if chunked else path
                if path not in server.files:
                    return self.send(404, "text/plain", b"not found")
                kind, body = server.files[path]
                self.send(200, kind, body, chunked=chunked)

            def send(
                self,
                status: int,
                kind: str | None,
                body: bytes,
                headers: dict[str, str] | None = None,
                chunked: bool = False,
            ) -> None:
                self.send_response(status)
                if kind:
                    self.send_header("Content-Type", kind)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for start in range(0, len(body), 4096):
                            part = body[start : start + 4096]
                            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client stopped reading at its cap
                    return
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return self.origin + path

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def server() -> Iterator[PageServer]:
    running = PageServer()
    for name in EXPECTED:
        running.files["/" + name] = ("text/html; charset=utf-8", (PAGES / name).read_bytes())
    yield running
    running.close()


def to(target: str) -> str:
    return "/to/" + urllib.parse.quote(target, safe="")


async def test_news_article_main_text(server: PageServer) -> None:
    url = server.url("/news_article.html")
    page = await fetch(url, allow_private=[server.origin])
    assert (page.url, page.content_type, page.truncated) == (url, "text/html", False)
    assert page.title == "City council approves river bridge repairs"
    assert "voted seven to two on Tuesday night" in page.text
    assert "## What happens next" in page.text  # headings as Markdown
    for absent in ("Subscribe for one dollar a week", "All rights reserved", "Accept all cookies"):
        assert absent not in page.text
    assert "<p" not in page.text and "</" not in page.text and "dataLayer" not in page.text


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_saved_pages(server: PageServer, name: str) -> None:
    page = await fetch(server.url("/" + name), allow_private=True)
    flat = " ".join(page.text.split())
    facts = EXPECTED[name]
    assert page.title is not None and facts["title"] in page.title
    for phrase in facts["content"]:
        assert " ".join(phrase.split()) in flat, phrase
    for phrase in facts["boilerplate"]:
        assert phrase not in flat, phrase


async def test_code_blocks_keep_their_lines(server: PageServer) -> None:
    page = await fetch(server.url("/docs_page.html"), allow_private=True)
    assert "```\nfrom tidepool import Retry, Session\n" in page.text
    assert '\n    response = session.get("https://api.example.com/items")\n' in page.text


async def test_text_types_pass_through(server: PageServer) -> None:
    server.files["/notes.txt"] = ("text/plain; charset=utf-8", "Plain <b>text</b> ✓\n".encode())
    server.files["/readme.md"] = ("text/markdown", b"# Title\n\n* item\n")
    server.files["/data.json"] = ("application/json", b'{"a": [1, 2]}')
    server.files["/latin1.txt"] = ("text/plain; charset=iso-8859-1", "café".encode("latin-1"))
    for path, text, kind in [
        ("/notes.txt", "Plain <b>text</b> ✓\n", "text/plain"),
        ("/readme.md", "# Title\n\n* item\n", "text/markdown"),
        ("/data.json", '{"a": [1, 2]}', "application/json"),
        ("/latin1.txt", "café", "text/plain"),
    ]:
        page = await fetch(server.url(path), allow_private=True)
        assert (page.text, page.content_type, page.title) == (text, kind, None)


async def test_binary_types_are_refused(server: PageServer) -> None:
    server.files["/paper.pdf"] = ("application/pdf", b"%PDF-1.7\n" + bytes(range(256)) * 100)
    server.files["/photo.png"] = ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(200))
    server.files["/untyped"] = (None, b"\x00\x01\x02 binary")
    for path, words in [
        ("/paper.pdf", "application/pdf"),
        ("/photo.png", "image/png"),
        ("/untyped", "binary data"),
    ]:
        with pytest.raises(UnsupportedContent) as caught:
            await fetch(server.url(path), allow_private=True)
        assert caught.value.code == "unsupported_content_type"
        assert words in caught.value.message and path in caught.value.message
    server.files["/untyped.html"] = (None, (PAGES / "short_page.html").read_bytes())
    page = await fetch(server.url("/untyped.html"), allow_private=True)
    assert "open Monday to Saturday" in page.text


async def test_size_cap(server: PageServer) -> None:
    body = b"<html><body><article>" + b"<p>Filler sentence for the cap.</p>" * 20_000
    server.files["/big.html"] = ("text/html", body + b"<p>THE END</p></article></body></html>")
    server.files["/big.txt"] = ("text/plain", b"x" * 100_000)
    for prefix in ("", "/chunked"):  # a declared length, then a counted stream
        page = await fetch(server.url(prefix + "/big.html"), allow_private=True, max_bytes=64_000)
        assert page.truncated
        assert "Filler sentence for the cap." in page.text and "THE END" not in page.text
        page = await fetch(server.url(prefix + "/big.txt"), allow_private=True, max_bytes=1000)
        assert page.truncated and page.text == "x" * 1000
    page = await fetch(server.url("/big.txt"), allow_private=True, max_bytes=100_000)
    assert not page.truncated and len(page.text) == 100_000


async def test_loopback_is_refused_by_default(server: PageServer) -> None:
    for url in (server.url("/short_page.html"), f"http://localhost:{server.port}/short_page.html"):
        with pytest.raises(UrlRefused) as caught:
            await fetch(url)
        assert "tools.allow_private_urls" in caught.value.message
    assert server.requests == []  # refused before connecting


async def test_redirects_are_checked_at_each_hop(server: PageServer) -> None:
    other = PageServer()
    try:
        other.files["/inside"] = ("text/plain", b"private data")
        inside = other.url("/inside")
        listed = [server.origin]  # the first server only
        for target in (inside, f"http://localhost:{server.port}/short_page.html"):
            with pytest.raises(UrlRefused) as caught:
                await fetch(server.url(to(target)), allow_private=listed)
            assert target in caught.value.message
        assert other.requests == []
        assert server.requests == [
            to(inside),
            to(f"http://localhost:{server.port}/short_page.html"),
        ]
        # allowed, the redirect is followed and the page names its final URL
        page = await fetch(server.url(to(inside)), allow_private=True)
        assert (page.url, page.text) == (inside, "private data")
        page = await fetch(server.url(to(inside)), allow_private=[server.origin, other.origin])
        assert page.url == inside
    finally:
        other.close()


async def test_redirect_limit_and_schemes(server: PageServer) -> None:
    url = server.url("/short_page.html")
    for _ in range(MAX_REDIRECTS):
        url = server.url(to(url))
    assert "Opening hours" in (await fetch(url, allow_private=True)).text
    with pytest.raises(UrlUnreachable) as caught:
        await fetch(server.url(to(url)), allow_private=True)
    assert "redirects" in caught.value.message
    with pytest.raises(UrlRefused) as caught:
        await fetch(server.url(to("file:///etc/passwd")), allow_private=True)
    assert "only http and https" in caught.value.message


async def test_http_errors_and_timeout(server: PageServer) -> None:
    with pytest.raises(UrlUnreachable) as caught:
        await fetch(server.url("/missing"), allow_private=True)
    assert "HTTP 404" in caught.value.message and caught.value.code == "url_not_accessible"
    server.delay = 2.0
    start = time.monotonic()
    with pytest.raises(UrlUnreachable) as caught:
        await fetch(server.url("/slow/short_page.html"), allow_private=True, timeout=0.3)
    assert time.monotonic() - start < 1.5 and "within 0.3 s" in caught.value.message
    gone = PageServer()
    gone.close()
    with pytest.raises(UrlUnreachable):
        await fetch(gone.url("/x"), allow_private=True)


def test_urls_in() -> None:
    texts = [
        "Read https://example.com/a, then (see http://example.org/b?x=1&y=2).",
        "Wiki: https://en.wikipedia.org/wiki/Python_(programming_language)!",
        'A link: [docs](https://docs.example.com/guide#setup) and "https://q.example.net/".',
        "Not these: ftp://example.com/f, example.com/bare, https://",
        '{"url": "https://json.example.com/item/1"}',
    ]
    assert urls_in(texts) == {
        "https://example.com/a",
        "http://example.org/b?x=1&y=2",
        "https://en.wikipedia.org/wiki/Python_(programming_language)",
        "https://docs.example.com/guide#setup",
        "https://q.example.net/",
        "https://json.example.com/item/1",
    }
    assert urls_in([]) == set()


def test_is_listed() -> None:
    known = urls_in(["See https://Example.com/docs/ and https://example.org/a?b=1"])
    assert is_listed("https://example.com/docs", known)
    assert is_listed("https://example.com/docs/#part", known)
    assert is_listed("https://example.org/a?b=1", known)
    assert not is_listed("https://example.org/a?b=2", known)
    assert not is_listed("https://example.com/docs/other", known)
    assert not is_listed("http://127.0.0.1/", known)
