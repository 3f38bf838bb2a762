"""Which URLs a tool may reach: check_url on literal addresses of each class, on names
that resolve to them, on allow lists; the connect-time guard."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from mlx_gateway.supervisor.tools import safety
from mlx_gateway.supervisor.tools.safety import (
    ALLOW_KEY,
    AddressRefused,
    GuardedTransport,
    UrlRefused,
    UrlUnreachable,
    check_url,
    is_public,
)
from tests.fixtures.image_server import ImageServer

REFUSED = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.8.9.10:8080/x", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://10.1.2.3/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://192.168.1.20/", "private"),
    ("http://[fd00::1]/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://100.64.0.1/", "not a public address"),  # shared address space (CGNAT)
    ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped IPv6
    ("http://[::ffff:192.168.0.1]/", "private"),
    ("http://2130706433/", "loopback"),  # 127.0.0.1 as one number
]


@pytest.mark.parametrize(("url", "words"), REFUSED)
async def test_non_public_literal_addresses_are_refused(url: str, words: str) -> None:
    with pytest.raises(UrlRefused) as caught:
        await check_url(url)
    error = caught.value
    assert (error.status, error.code) == (400, "url_not_allowed")
    assert url in error.message and words in error.message
    assert ALLOW_KEY in error.message


@pytest.mark.parametrize(
    "url", ["http://93.184.215.14/", "https://[2606:4700::1111]/dns", "http://8.8.8.8:8080/"]
)
async def test_public_literal_addresses_pass(url: str) -> None:
    await check_url(url)


@pytest.mark.parametrize(
    "url", ["ftp://example.com/f", "file:///etc/passwd", "gopher://x/", "data:text/plain,hi"]
)
async def test_only_http_and_https(url: str) -> None:
    with pytest.raises(UrlRefused) as caught:
        await check_url(url, allow_private=True)
    assert "only http and https" in caught.value.message


async def test_localhost_is_refused_naming_the_address() -> None:
    with pytest.raises(UrlRefused) as caught:
        await check_url("http://localhost:8123/api")
    message = caught.value.message
    assert "localhost resolves to" in message and "loopback" in message
    assert "'http://localhost:8123'" in message  # the origin to list


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> None:
    """Names resolve to ``answers`` through the event loop's getaddrinfo."""
    import asyncio

    real = asyncio.BaseEventLoop.getaddrinfo

    async def getaddrinfo(self: Any, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port),
                )
                for a in answers[host]
            ]
        return await real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", getaddrinfo)


async def test_a_name_resolving_to_loopback_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(
        monkeypatch,
        {
            "sneaky.example.com": ["127.0.0.1"],
            "public.example.com": ["93.184.215.14"],
            "mixed.example.com": ["93.184.215.14", "10.0.0.5"],
            "v6.example.com": ["2606:4700::1111", "::ffff:169.254.1.1"],
        },
    )
    await check_url("https://public.example.com/page")
    for host, address in [
        ("sneaky.example.com", "127.0.0.1"),
        ("mixed.example.com", "10.0.0.5"),  # every address must be public
        ("v6.example.com", "::ffff:169.254.1.1"),
    ]:
        with pytest.raises(UrlRefused) as caught:
            await check_url(f"https://{host}/page")
        assert f"{host} resolves to {address}" in caught.value.message


async def test_unresolvable_host_is_unreachable() -> None:
    with pytest.raises(UrlUnreachable) as caught:
        await check_url("http://no-such-host.invalid/x")
    assert caught.value.code == "url_not_accessible"
    assert "no-such-host.invalid" in caught.value.message


async def test_allow_lists() -> None:
    await check_url("http://127.0.0.1:9000/x", allow_private=True)
    # an origin: any path on it, no other port or scheme
    origin = ["http://127.0.0.1:9000"]
    await check_url("http://127.0.0.1:9000/", allow_private=origin)
    await check_url("http://127.0.0.1:9000/a/b?c=d", allow_private=origin)
    for other in ("http://127.0.0.1:9001/", "https://127.0.0.1:9000/", "http://127.0.0.2:9000/"):
        with pytest.raises(UrlRefused):
            await check_url(other, allow_private=origin)
    # a URL prefix: that path and below only
    prefix = ["http://192.168.1.50:8123/api/"]
    await check_url("http://192.168.1.50:8123/api/states", allow_private=prefix)
    await check_url("http://192.168.1.50:8123/api", allow_private=prefix)
    with pytest.raises(UrlRefused):  # not below the prefix
        await check_url("http://192.168.1.50:8123/apix", allow_private=prefix)
    # a host, with or without a port; default ports count
    await check_url("http://localhost:5000/x", allow_private=["localhost"])
    await check_url("http://LOCALHOST./x", allow_private=["localhost:80"])
    with pytest.raises(UrlRefused):
        await check_url("http://localhost:5000/x", allow_private=["localhost:80"])
    await check_url("https://[::1]/x", allow_private=["https://[::1]:443"])
    # one entry given as a bare string is one entry, not its characters
    await check_url("http://127.0.0.1:9000/x", allow_private="http://127.0.0.1:9000")
    with pytest.raises(UrlRefused):
        await check_url("http://127.0.0.1/", allow_private=False)
    with pytest.raises(UrlRefused):
        await check_url("http://127.0.0.1/", allow_private=[])


def test_is_public() -> None:
    assert is_public("93.184.215.14") and is_public("2606:4700::1111")
    assert not is_public("::ffff:10.0.0.1") and not is_public("fe80::1%eth0")


async def test_the_transport_refuses_at_connect_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS may answer differently at connect time than at the check: the transport
    checks the addresses it connects to."""
    with ImageServer() as server:
        server.files["/x"] = b"hello"
        url = server.url("/x")
        async with httpx.AsyncClient(transport=GuardedTransport(), trust_env=False) as client:
            with pytest.raises(AddressRefused):
                await client.get(url)
        listed = GuardedTransport([f"http://127.0.0.1:{server.port}"])
        async with httpx.AsyncClient(transport=listed, trust_env=False) as client:
            assert (await client.get(url)).content == b"hello"
            with pytest.raises(AddressRefused):  # another port of the same host
                await client.get(f"http://127.0.0.1:{server.port + 1}/x")
        monkeypatch.setattr(safety, "is_public", lambda address: True)
        async with httpx.AsyncClient(transport=GuardedTransport(), trust_env=False) as client:
            assert (await client.get(url)).content == b"hello"
