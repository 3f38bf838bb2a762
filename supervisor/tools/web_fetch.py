"""The ``web_fetch`` tool: a URL in, the page's main text out.

* Safety: every URL, the first and each redirect hop (followed by hand, at most
  :data:`MAX_REDIRECTS`), passes :func:`~.safety.check_url`, and connections go
  through :class:`~.safety.GuardedTransport`; proxies from the environment are not
  used (the proxy would be the address checked).
* Caps: the whole fetch (redirects and body) must end within ``timeout`` seconds; the
  body is read up to ``max_bytes`` and the rest is left unread (the page is marked
  ``truncated``). A type that is not text is refused from its headers, before its body.
* Text: HTML is reduced to its main text by trafilatura, written as Markdown (headings,
  lists, tables, code blocks), without navigation, ads, comments or footers;
  docs/tools.md says why trafilatura. Plain text, Markdown, JSON, XML and other
  ``text/*`` types pass through as they are. PDFs and other binary types are refused.

Errors are :class:`~.safety.UrlRefused` (``url_not_allowed``),
:class:`~.safety.UrlUnreachable` (``url_not_accessible``) and
:class:`UnsupportedContent` (``unsupported_content_type``): the codes of Anthropic's
``web_fetch_tool_error``.

:func:`urls_in` finds the URLs of a conversation: web_fetch may fetch only those.
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.tools.safety import (
    ALLOW_KEY,
    AddressRefused,
    AllowPrivate,
    GuardedTransport,
    UrlRefused,
    UrlUnreachable,
    address_class,
    check_url,
    origin,
    shown,
)

MIB = 1 << 20
MAX_REDIRECTS = 5
USER_AGENT = "mlx-gateway (web fetch)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,*/*;q=0.5"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-ndjson",
    }
)


@dataclass(frozen=True)
class Page:
    url: str
    """The final URL, after redirects."""
    title: str | None
    text: str
    content_type: str
    """The media type the server declared (``text/html``), without parameters."""
    truncated: bool = False
    """The body was larger than ``max_bytes``: ``text`` comes from its first bytes."""


class UnsupportedContent(BadRequest):
    def __init__(self, url: str, content_type: str) -> None:
        super().__init__(
            f"The page at '{shown(url)}' is {content_type}, which web_fetch cannot read: "
            "only HTML and text (plain, Markdown, JSON, XML) are supported.",
            code="unsupported_content_type",
        )
        self.url = url


async def fetch(
    url: str,
    *,
    allow_private: AllowPrivate = False,
    max_bytes: int = 5 * MIB,
    timeout: float = 15,
) -> Page:
    """GET ``url`` and return its text (see the module docstring)."""
    async with httpx.AsyncClient(
        transport=GuardedTransport(allow_private),
        follow_redirects=False,
        trust_env=False,
        timeout=timeout,
        headers={"User-Agent": USER_AGENT, "Accept": ACCEPT},
    ) as client:
        try:
            async with asyncio.timeout(timeout):
                final, content_type, charset, body, truncated = await _follow(
                    client, url, allow_private, max_bytes
                )
        except TimeoutError:
            raise UrlUnreachable(url, f"no answer within {timeout:g} s") from None
        except AddressRefused as exc:  # DNS answered differently at connect time
            raise UrlRefused(
                url,
                f"{exc.host} resolves to {exc.address}, which is "
                f"{address_class(exc.address)}. Set {ALLOW_KEY} to true, or list "
                f"'{origin(url)}' in it, to let tools reach it",
            ) from None
        except httpx.HTTPError as exc:
            raise UrlUnreachable(url, str(exc) or type(exc).__name__) from None
    if content_type in HTML_TYPES or (not content_type and _looks_like_html(body)):
        title, text = await asyncio.to_thread(html_text, body, charset, final)
        return Page(final, title, text, content_type or "text/html", truncated)
    return Page(final, None, _decode(body, charset), content_type or "text/plain", truncated)


async def _follow(
    client: httpx.AsyncClient, url: str, allow_private: AllowPrivate, max_bytes: int
) -> tuple[str, str, str | None, bytes, bool]:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        await check_url(current, allow_private)
        async with client.stream("GET", current) as response:
            if response.is_redirect:
                location = response.headers.get("location", "")
                current = urllib.parse.urljoin(current, location)
                continue
            if response.status_code != 200:
                raise UrlUnreachable(current, f"the server answered HTTP {response.status_code}")
            header = response.headers.get("content-type", "")
            content_type = header.split(";", 1)[0].strip().lower()
            if content_type and not _readable(content_type):
                raise UnsupportedContent(current, content_type)
            body, truncated = await _read_body(response, max_bytes)
            if not content_type and not _looks_like_text(body):
                raise UnsupportedContent(current, "binary data (no Content-Type)")
            return current, content_type, response.charset_encoding, body, truncated
    raise UrlUnreachable(url, f"more than {MAX_REDIRECTS} redirects")


def _readable(content_type: str) -> bool:
    return (
        content_type in HTML_TYPES
        or content_type.startswith("text/")
        or content_type in TEXT_TYPES
        or content_type.endswith(("+json", "+xml"))
    )


async def _read_body(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            return bytes(body[:limit]), True  # the rest is left unread
    return bytes(body), False


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head


def _looks_like_text(body: bytes) -> bool:
    sample = body[:4096]
    if b"\0" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(sample) - 3  # a character cut at the sample's end
    return True


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return body.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- HTML


def html_text(body: bytes, charset: str | None, url: str | None = None) -> tuple[str | None, str]:
    """The title and main text (Markdown) of an HTML page. Where trafilatura finds
    no main text (a page of links, say), the body's whole text is used."""
    import lxml.html
    import trafilatura

    markup = _decode(body, charset) if charset else body
    try:
        tree = lxml.html.fromstring(markup)
    except (ValueError, lxml.etree.ParserError):  # empty, or not parseable at all
        return None, ""
    title = _title(tree)
    text = trafilatura.extract(
        tree,
        url=url,
        output_format="markdown",
        include_formatting=True,
        include_comments=False,
        include_tables=True,
        include_links=False,
    )
    if not text:  # parsed again: trafilatura prunes the tree it is given
        tree = lxml.html.fromstring(markup)
        for node in tree.xpath("//script|//style|//noscript|//template"):
            node.drop_tree()
        text = "\n".join(line.strip() for line in tree.text_content().splitlines())
        text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return title, text


def _title(tree: object) -> str | None:
    for path in ('//meta[@property="og:title"]/@content', "//title/text()", "//h1//text()"):
        found = tree.xpath(path)  # type: ignore[attr-defined]
        if found and str(found[0]).strip():
            return " ".join(str(found[0]).split())
    return None


# ---------------------------------------------------------------- URLs of a conversation

_URL = re.compile(r"https?://[^\s<>\"'`{}|\\^\[\]]+", re.IGNORECASE)
_TRAILING = ".,;:!?*_~"


def urls_in(texts: Iterable[str]) -> set[str]:
    """The http(s) URLs written in ``texts`` (a conversation's messages and earlier
    tool results), without the punctuation that ends a sentence or closes a bracket."""
    found: set[str] = set()
    for text in texts:
        for match in _URL.finditer(text):
            url = match.group(0)
            while url:
                if url[-1] in _TRAILING or (url[-1] == ")" and url.count(")") > url.count("(")):
                    url = url[:-1]
                else:
                    break
            if urllib.parse.urlsplit(url).hostname:
                found.add(url)
    return found


def is_listed(url: str, urls: Iterable[str]) -> bool:
    """Whether ``url`` is one of ``urls`` up to a fragment, a trailing slash and the
    case of scheme and host (what a model changes when it copies a URL)."""
    wanted = _comparable(url)
    return any(_comparable(known) == wanted for known in urls)


def _comparable(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), path, parts.query, "")
    )
