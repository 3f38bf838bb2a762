"""Reading media URLs in the gateway: data: URLs, http(s) fetches from a real local
server with the size cap, the timeout, redirects and the address guard, and local
files under a modality's folders; each modality's rules from a real entry."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.engine import media_table
from mlx_gateway.supervisor.engine.media_policy import media_policy
from mlx_gateway.supervisor.engine.url_reader import (
    MAX_REDIRECTS,
    MIB,
    TooLarge,
    UrlRules,
    decode_base64,
    read_data_url,
    read_url,
)
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.tools import safety
from mlx_gateway.supervisor.tools.safety import is_public
from tests.fixtures.image_server import ImageServer

PARAM = "messages[0].content[0].image_url.url"
IMAGE = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40  # 10 KiB; the gateway does not decode
OPEN = UrlRules(allow_private=True, timeout=5.0)
"""The local server is on loopback: tests that fetch from it must allow that."""


@pytest.fixture(scope="module")
def server() -> Iterator[ImageServer]:
    with ImageServer() as running:
        running.files["/img.png"] = IMAGE
        yield running


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


# ---------------------------------------------------------------- data: URLs


def test_data_url() -> None:
    assert read_data_url(data_url(IMAGE), UrlRules(max_bytes=1 << 20), PARAM)[0] == IMAGE
    wrapped = data_url(IMAGE).replace("A", "A\n", 3)  # line breaks inside the base64
    assert read_data_url(wrapped, UrlRules(max_bytes=1 << 20), PARAM)[0] == IMAGE
    percent = read_data_url("data:,%89PNG", UrlRules(max_bytes=100), PARAM)
    assert percent == (b"\x89PNG", "")  # not base64


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("data:image/png;base64,iVBORw0KGgo!!!", "not valid base64"),
        ("data:image/png;base64,iVBORw0KGg", "not valid base64"),  # bad padding
        ("data:image/png;base64", "no ','"),
        ("data:text/html;base64,PGI+", "not an image type"),
        ("data:image/png;base64,", "no data"),
    ],
)
def test_bad_data_urls_are_400(url: str, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        read_data_url(url, UrlRules(max_bytes=1 << 20), PARAM)[0]
    assert words in caught.value.message
    assert caught.value.param == PARAM


def test_large_data_url_is_413() -> None:
    with pytest.raises(TooLarge) as caught:
        read_data_url(data_url(IMAGE), UrlRules(max_bytes=1000), PARAM)[0]
    assert caught.value.status == 413
    assert caught.value.param == PARAM
    assert "too large" in caught.value.message and "max_image_mb" in caught.value.message


async def test_other_schemes_are_400() -> None:
    for url in ("file:///etc/passwd", "ftp://host/x.png", "just-a-name.png"):
        with pytest.raises(BadRequest) as caught:
            await read_url(url, OPEN, PARAM)
        assert "not supported" in caught.value.message


# ---------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("::1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.10", False),
        ("169.254.169.254", False),  # cloud metadata
        ("fe80::1%eth0", False),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("fd00::1", False),
    ],
)
def test_is_public(address: str, public: bool) -> None:
    assert is_public(address) is public


# ---------------------------------------------------------------- http(s)


async def test_fetch(server: ImageServer) -> None:
    assert await read_url(server.url("/img.png"), OPEN, PARAM) == IMAGE
    assert await read_url(server.url("/chunked/img.png"), OPEN, PARAM) == IMAGE
    assert await read_url(server.url("/img.png", host="localhost"), OPEN, PARAM) == IMAGE


async def test_loopback_is_refused_by_default(server: ImageServer) -> None:
    before = len(server.requests)
    for host in ("127.0.0.1", "localhost"):
        url = server.url("/img.png", host=host)
        with pytest.raises(BadRequest) as caught:
            await read_url(url, UrlRules(), PARAM)
        error = caught.value
        assert (error.status, error.code, error.param) == (400, "image_url_refused", PARAM)
        assert url in error.message
        assert "allow_private_image_urls" in error.message
    assert len(server.requests) == before  # refused before connecting


async def test_redirects(server: ImageServer) -> None:
    url = server.url(f"/redirect/{MAX_REDIRECTS}/img.png")
    assert await read_url(url, OPEN, PARAM) == IMAGE
    too_many = server.url(f"/redirect/{MAX_REDIRECTS + 1}/img.png")
    with pytest.raises(BadRequest) as caught:
        await read_url(too_many, OPEN, PARAM)
    assert "redirects" in caught.value.message
    assert too_many in caught.value.message


async def test_redirect_to_a_private_address_is_refused(
    server: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Let the server's own address count as public, as a real public host would;
    # the redirect points elsewhere on loopback, which stays private.
    monkeypatch.setattr(safety, "is_public", lambda address: address == "127.0.0.1")
    assert await read_url(server.url("/img.png"), UrlRules(), PARAM) == IMAGE
    inside = server.url("/img.png", host="127.0.0.2")
    url = server.url("/to/" + inside.replace(":", "%3A").replace("/", "%2F"))
    with pytest.raises(BadRequest) as caught:
        await read_url(url, UrlRules(), PARAM)
    assert caught.value.code == "image_url_refused"
    assert "127.0.0.2" in caught.value.message


async def test_http_errors_name_the_url(server: ImageServer) -> None:
    missing = server.url("/missing.png")
    with pytest.raises(BadRequest) as caught:
        await read_url(missing, OPEN, PARAM)
    assert missing in caught.value.message and "HTTP 404" in caught.value.message
    assert (caught.value.code, caught.value.param) == ("image_url_unreachable", PARAM)


async def test_unreachable_url_is_400_naming_it() -> None:
    with ImageServer() as gone:
        url = gone.url("/img.png")
    with pytest.raises(BadRequest) as caught:
        await read_url(url, OPEN, PARAM)
    assert url in caught.value.message
    assert caught.value.code == "image_url_unreachable"
    unresolvable = "http://no-such-host.invalid/img.png"
    with pytest.raises(BadRequest) as caught:
        await read_url(unresolvable, OPEN, PARAM)
    assert unresolvable in caught.value.message


async def test_too_large_is_413(server: ImageServer) -> None:
    small = UrlRules(allow_private=True, max_bytes=4096)
    for path in ("/img.png", "/chunked/img.png"):  # declared length, then counted bytes
        with pytest.raises(TooLarge) as caught:
            await read_url(server.url(path), small, PARAM)
        assert caught.value.status == 413
        assert caught.value.param == PARAM


async def test_timeout(server: ImageServer) -> None:
    server.delay = 2.0
    url = server.url("/slow/img.png")
    with pytest.raises(BadRequest) as caught:
        await read_url(url, UrlRules(allow_private=True, timeout=0.3), PARAM)
    assert url in caught.value.message
    assert "no answer within 0.3 s" in caught.value.message


# ---------------------------------------------------------------- each modality's rules


def rules_of(tmp_path: Path, modality: str, **keys: Any) -> UrlRules:
    entry = model_entry(model_path="org/some-vl", model_type="vlm", **keys)
    return media_policy(entry, ServerConfig()).of(modality)


async def test_video_rules_take_base64_or_files_in_their_folders(tmp_path: Path) -> None:
    inside, outside = tmp_path / "clips", tmp_path / "elsewhere"
    inside.mkdir(), outside.mkdir()
    (inside / "a.mp4").write_bytes(b"\0" * 2048)
    (outside / "b.mp4").write_bytes(b"\0" * 16)
    rules = rules_of(
        tmp_path, media_table.VIDEO, max_video_mb=0.001, local_video_dirs=[str(inside)]
    )
    assert await read_url(data_url(b"\0" * 16, "video/mp4"), rules, PARAM) == b"\0" * 16
    for url, code in [
        ("data:,abc", "invalid_video_url"),  # percent-encoded: not for videos
        (data_url(b"x", "image/png"), "invalid_video_url"),
        (f"file://{outside / 'b.mp4'}", "video_path_refused"),
        (str(inside / ".." / "elsewhere" / "b.mp4"), "video_path_refused"),  # no way out
        ("ftp://host/a.mp4", "invalid_video_url"),
    ]:
        with pytest.raises(BadRequest) as caught:
            await read_url(url, rules, PARAM)
        assert (caught.value.code, caught.value.param) == (code, PARAM), url
    small = inside / "small.mp4"
    small.write_bytes(b"\1" * 8)
    assert await read_url(f"file://{small}", rules, PARAM) == b"\1" * 8
    with pytest.raises(TooLarge) as large:
        await read_url(str(inside / "a.mp4"), rules, PARAM)
    assert (large.value.status, large.value.code) == (400, "video_too_large")
    assert "max_video_mb" in large.value.message
    no_dirs = rules_of(tmp_path, media_table.VIDEO)
    with pytest.raises(BadRequest) as caught:
        await read_url(str(inside / "a.mp4"), no_dirs, PARAM)
    assert caught.value.code == "video_path_refused" and "local_video_dirs" in caught.value.message


async def test_image_and_document_rules_read_no_paths(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(IMAGE)
    for modality, code in [
        (media_table.IMAGE, "invalid_image_url"),
        (media_table.DOCUMENT, "invalid_document"),
    ]:
        with pytest.raises(BadRequest) as caught:
            await read_url(str(tmp_path / "a.png"), rules_of(tmp_path, modality), PARAM)
        assert caught.value.code == code and "not supported" in caught.value.message


def test_document_rules(tmp_path: Path) -> None:
    rules = rules_of(tmp_path, media_table.DOCUMENT, max_document_mb=0.001)
    assert (rules.max_bytes, rules.size_key) == (int(0.001 * MIB), "max_document_mb")
    data = base64.b64encode(b"%PDF-1.4 ...").decode()
    assert decode_base64(data, rules, PARAM) == b"%PDF-1.4 ..."
    pdf = read_data_url(f"data:application/pdf;base64,{data}", rules, PARAM)
    assert pdf == (b"%PDF-1.4 ...", "application/pdf")
    with pytest.raises(TooLarge) as large:
        decode_base64(base64.b64encode(b"x" * 4096).decode(), rules, PARAM, f"in {PARAM}")
    assert (large.value.status, large.value.code) == (400, "document_too_large")
    assert PARAM in large.value.message and "max_document_mb" in large.value.message
