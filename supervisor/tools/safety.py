"""Which addresses the gateway may reach on a request's behalf.

A request can name URLs that the gateway then fetches itself: an image URL of a chat
request, a page for the ``web_fetch`` tool, a per-request MCP ``server_url``. Unless
the configuration allows it, none of them may reach a loopback, private, link-local,
unspecified, multicast or reserved address (IPv4 or IPv6; an IPv4-mapped IPv6 address
counts as its IPv4 address), so a client cannot use the gateway to read the machine's
own services or its network.

Two checks, meant to be used together:

* :func:`check_url` before each request and each redirect hop: an http(s) URL whose
  host resolves only to public addresses, or that the allow list names;
* :class:`GuardedTransport` at connect time: it resolves the host itself, refuses
  non-public addresses and connects to an address that passed, so DNS cannot answer
  differently between the check and the connection.

URLs written in the configuration (a SearXNG instance, an MCP server's ``url``) are
trusted and not checked: the admin wrote them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import httpcore
import httpx

from mlx_gateway.supervisor.errors import BadRequest

ALLOW_KEY = "tools.allow_private_urls"
"""The configuration key that lets tools reach private addresses (named in errors)."""
DEFAULT_PORTS = {"http": 80, "https": 443}
SHOWN_URL_CHARS = 200

AllowPrivate = bool | Sequence[str]
"""``True`` (any address), ``False`` (public addresses only) or a list of URLs, URL
prefixes, origins (``http://host:port``) or host names (``host`` or ``host:port``)
that may be private."""


class UrlRefused(BadRequest):
    """A URL a tool may not fetch: not http(s), or a non-public address."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"The URL '{shown(url)}' was refused: {why}.", code="url_not_allowed")
        self.url = url


class UrlUnreachable(BadRequest):
    """A URL that could not be fetched (no such host, no answer, an HTTP error)."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(
            f"The URL '{shown(url)}' could not be fetched: {why}.", code="url_not_accessible"
        )
        self.url = url


class AddressRefused(Exception):
    """Raised at connect time (by :class:`GuardedTransport`): ``host`` resolved only to
    addresses the policy does not allow."""

    def __init__(self, host: str, address: str) -> None:
        super().__init__(f"{host} resolves to {address}")
        self.host, self.address = host, address


def shown(url: str) -> str:
    """``url`` shortened for an error message."""
    if len(url) <= SHOWN_URL_CHARS:
        return url
    return url[: SHOWN_URL_CHARS - 1] + "…"


# ---------------------------------------------------------------- addresses


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_public(address: str) -> bool:
    """Whether ``address`` is a global unicast address (not loopback, private,
    link-local, shared, reserved, multicast…). IPv4-mapped IPv6 counts as IPv4."""
    ip = _ip(address)
    return ip.is_global and not ip.is_multicast


def address_class(address: str) -> str:
    """What a non-public ``address`` is, in words ("a loopback address")."""
    ip = _ip(address)
    for test, words in (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a private address"),
    ):
        if test:
            return words
    return "not a public address" if not is_public(address) else "a public address"


# ---------------------------------------------------------------- allow lists


def _entries(allow: AllowPrivate) -> list[str]:
    if isinstance(allow, bool):
        return []
    if isinstance(allow, str):  # one entry given bare
        return [allow]
    return [entry.strip() for entry in allow if entry.strip()]


def _host(name: str | None) -> str:
    return (name or "").lower().rstrip(".")


def _port(parts: urllib.parse.SplitResult) -> int | None:
    try:
        return parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None


def _listed(url: str, allow: AllowPrivate) -> bool:
    """Whether the allow list names ``url``: its origin, a prefix of it, or its host."""
    if allow is True:
        return True
    parts = urllib.parse.urlsplit(url)
    host, port = _host(parts.hostname), _port(parts)
    for entry in _entries(allow):
        if "://" not in entry:  # a host name, with or without a port
            bare = urllib.parse.urlsplit("//" + entry)
            if _host(bare.hostname) == host and (bare.port is None or bare.port == port):
                return True
            continue
        listed = urllib.parse.urlsplit(entry)
        if (listed.scheme.lower(), _host(listed.hostname), _port(listed)) != (
            parts.scheme.lower(),
            host,
            port,
        ):
            continue
        prefix = listed.path.rstrip("/")
        if not prefix or parts.path == prefix or parts.path.startswith(prefix + "/"):
            return True
    return False


def _listed_endpoint(host: str, port: int, allow: AllowPrivate) -> bool:
    """Whether the allow list names a URL on ``host:port`` (the connect-time check)."""
    if allow is True:
        return True
    for entry in _entries(allow):
        listed = urllib.parse.urlsplit(entry if "://" in entry else "//" + entry)
        try:
            listed_port = listed.port or DEFAULT_PORTS.get(listed.scheme.lower())
        except ValueError:
            continue
        if _host(listed.hostname) == _host(host) and listed_port in (None, port):
            return True
    return False


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2].lower()}"


# ---------------------------------------------------------------- the checks


async def check_url(url: str, allow_private: AllowPrivate = False) -> None:
    """Raise :class:`UrlRefused` unless ``url`` is an http(s) URL that a tool may reach.

    Every address the host resolves to (the event loop's ``getaddrinfo``) must be
    public, unless ``allow_private`` is true or lists the URL (see
    :data:`AllowPrivate`). A host that does not resolve raises
    :class:`UrlUnreachable`. Call it again for each redirect hop."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(url, f"it is not a valid URL ({exc})") from None
    if parts.scheme.lower() not in DEFAULT_PORTS:
        raise UrlRefused(url, "only http and https URLs can be fetched")
    host = parts.hostname
    if not host:
        raise UrlRefused(url, "it names no host")
    if _listed(url, allow_private):
        return
    addresses = await resolve(host, port or DEFAULT_PORTS[parts.scheme.lower()], url)
    for address in addresses:
        if not is_public(address):
            where = address if host == address else f"{host} resolves to {address}, which"
            raise UrlRefused(
                url,
                f"{where} is {address_class(address)}. Set {ALLOW_KEY} to true, or "
                f"list '{origin(url)}' in it, to let tools reach it",
            )


async def resolve(host: str, port: int, url: str) -> list[str]:
    """The addresses of ``host`` (raises :class:`UrlUnreachable` naming ``url``)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UrlUnreachable(url, f"cannot resolve {host} ({exc})") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise UrlUnreachable(url, f"{host} resolves to no address")
    return addresses


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves the host itself, refuses non-public addresses (unless allowed) and
    connects to an address that passed; TLS still verifies the host name."""

    def __init__(self, allow_private: AllowPrivate) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._allow_private = allow_private

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        listed = _listed_endpoint(host, port, self._allow_private)
        allowed = [a for a in addresses if listed or is_public(a)]
        if not allowed:
            raise AddressRefused(host, addresses[0] if addresses else "nothing")
        error: Exception | None = None
        for address in allowed:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                error = exc
        assert error is not None
        raise error

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose connections reach only public addresses, or those
    ``allow_private`` allows (see :data:`AllowPrivate`); a refused connection raises
    :class:`AddressRefused`. Use it with ``trust_env=False`` (a proxy from the
    environment would be the address checked, not the host)."""

    def __init__(self, allow_private: AllowPrivate = False) -> None:
        super().__init__(retries=0)
        # httpx builds its pool without a way to pass a network backend; replace it
        # with the same pool over the guarded backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            network_backend=_GuardedBackend(allow_private),
        )
