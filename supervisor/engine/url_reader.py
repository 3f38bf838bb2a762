"""The one reader of media URLs: the bytes behind an image's, a video's or a
document's URL, under that modality's rules for the model (:class:`UrlRules`).

Three sources, each refused with a client error that names the URL and the request
field:

* ``data:`` URLs (base64; percent-encoded too where the rules allow it), checked
  against the modality's media types and its size cap before they are decoded;
* http(s) URLs, fetched by the gateway itself (the worker never touches the network)
  with three guards:

  * size: a file larger than the cap (``max_image_mb``, ``max_video_mb``,
    ``max_document_mb``) is refused from ``Content-Length`` before the body, or
    while counting the body as it arrives;
  * time: the whole fetch, redirects included, must end within the model's
    ``image_fetch_timeout``;
  * address: unless ``allow_private_image_urls`` is set, no connection is made to a
    loopback, private, link-local or otherwise non-global address. The check runs at
    connect time on the addresses the host name resolved to, and the connection goes
    to an address that passed it (so DNS cannot answer differently in between); it
    covers every redirect hop, which are followed by hand (at most
    :data:`MAX_REDIRECTS`), and proxies from the environment are not used. The
    address classes and the connect-time guard are the tools' (:mod:`..tools.safety`);

* file paths (``/…``, ``~/…``, ``file://…``) under the folders the model lists for
  the modality (``local_video_dirs``), only for a modality that has such a key.

The content is not inspected here: the worker (or :mod:`.pdf`) decodes it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import urllib.parse
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.tools.safety import AddressRefused, GuardedTransport

MIB = 1 << 20
MAX_REDIRECTS = 3
USER_AGENT = "mlx-gateway (media fetch)"
SHOWN_URL_CHARS = 120
"""Longer URLs (``data:`` URLs above all) are shortened in messages."""


@dataclass(frozen=True)
class UrlRules:
    """How one modality's URLs are read for one model (the image defaults)."""

    noun: str = "image"
    """What the URL holds, in messages (``The image URL …``) and codes."""
    max_bytes: int = 20 * MIB
    size_key: str = "max_image_mb"
    timeout: float = 10.0
    allow_private: bool = False
    allowed_types: tuple[str, ...] = ("image/",)
    """A ``data:`` URL's media type must start with one of these (or be absent);
    empty: any type but :attr:`refused_types`."""
    refused_types: tuple[str, ...] = ()
    example_type: str = "image/png"
    percent_data: bool = True
    """``data:`` URLs without ``;base64`` (percent-encoded) are read too."""
    too_large_status: int = 413
    url_code: str = "invalid_image_url"
    """The code of a malformed or unsupported URL."""
    local_key: str = ""
    """The entry's key listing folders whose files may be named (``local_video_dirs``);
    empty: paths are not a source of this modality."""
    local_dirs: tuple[Path, ...] = ()


class TooLarge(GatewayError):
    """A file past its modality's cap (413 for images, 400 for the others)."""

    type = "invalid_request_error"

    def __init__(self, rules: UrlRules, what: str, param: str) -> None:
        self.status = rules.too_large_status
        super().__init__(
            f"The {rules.noun} {what} is too large: the limit is "
            f"{rules.max_bytes / MIB:g} MiB ({rules.size_key}).",
            param=param,
            code=f"{rules.noun}_too_large",
        )


def shown(url: str) -> str:
    """``url`` shortened for an error message."""
    if len(url) <= SHOWN_URL_CHARS:
        return url
    return url[: SHOWN_URL_CHARS - 1] + "…"


async def read_url(url: str, rules: UrlRules, param: str) -> bytes:
    """The file behind ``url``; ``param`` is the request field holding it (for errors).
    Raises :class:`~..errors.BadRequest` (malformed, unreachable, refused, not found,
    timed out, not allowed) or :class:`TooLarge`."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return (await asyncio.to_thread(read_data_url, url, rules, param))[0]
    if scheme in ("http", "https"):
        return await fetch(url, rules, param)
    if rules.local_key and (scheme == "file" or url.startswith(("/", "~"))):
        path = url[len("file://") :] if scheme == "file" else url
        return await asyncio.to_thread(_local_file, path, rules, param)
    paths = f", or a file path under the model's {rules.local_key}" if rules.local_key else ""
    raise BadRequest(
        f"The {rules.noun} URL '{shown(url)}' is not supported: use a data: URL (base64)"
        f"{',' if paths else ' or'} an http(s) URL{paths}.",
        param=param,
        code=rules.url_code,
    )


async def read_all(reads: Iterable[Awaitable[bytes]]) -> list[bytes]:
    """Every read's bytes, in order, all run at once; raises the first failure."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_awaited(read)) for read in reads]
    except ExceptionGroup as failed:
        first = _first_error(failed)
        if first is None:
            raise
        raise first from None
    return [task.result() for task in tasks]


async def _awaited(read: Awaitable[bytes]) -> bytes:
    return await read


def _first_error(group: BaseExceptionGroup[Any]) -> GatewayError | None:
    for exc in group.exceptions:
        if isinstance(exc, GatewayError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            inner = _first_error(exc)
            if inner is not None:
                return inner
    return None


def read_data_url(url: str, rules: UrlRules, param: str) -> tuple[bytes, str]:
    """The bytes of a ``data:[<media type>][;base64],<data>`` URL and its media type
    (``''`` if it names none)."""
    header, sep, data = url.partition(",")
    if not sep:
        raise BadRequest(
            f"The data URL '{shown(url)}' has no ',' before its data.",
            param=param,
            code=rules.url_code,
        )
    media_type = header[5:].split(";", 1)[0].strip().lower()
    allowed = not rules.allowed_types or media_type.startswith(rules.allowed_types)
    refused = bool(rules.refused_types) and media_type.startswith(rules.refused_types)
    if media_type and (refused or not allowed):
        raise BadRequest(
            f"The data URL's media type '{media_type}' is not a{_n(rules.noun)} {rules.noun} "
            f"type ({rules.example_type.split('/')[0]}/…).",
            param=param,
            code=rules.url_code,
        )
    if header.lower().endswith(";base64"):
        return decode_base64(data, rules, param, what="in the data URL"), media_type
    if not rules.percent_data:
        raise BadRequest(
            f"The data URL '{shown(header)}' is not base64 (data:{rules.example_type};base64,…).",
            param=param,
            code=rules.url_code,
        )
    raw = urllib.parse.unquote_to_bytes(data)
    if not raw:
        raise BadRequest("The data URL holds no data.", param=param, code=rules.url_code)
    if len(raw) > rules.max_bytes:
        raise TooLarge(rules, "in the data URL", param)
    return raw, media_type


def decode_base64(data: str, rules: UrlRules, param: str, what: str = "in the data URL") -> bytes:
    """Base64 ``data`` (line breaks allowed) decoded, refused past the cap before it is."""
    compact = "".join(data.split())  # clients wrap long base64 in lines
    if len(compact) // 4 * 3 > rules.max_bytes + 2:  # refuse before decoding
        raise TooLarge(rules, what, param)
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"The {rules.noun} {what} is not valid base64.", param=param, code=rules.url_code
        ) from None
    if not raw:
        raise BadRequest(
            f"The {rules.noun} {what} holds no data.", param=param, code=rules.url_code
        )
    if len(raw) > rules.max_bytes:
        raise TooLarge(rules, what, param)
    return raw


def _n(noun: str) -> str:
    return "n" if noun[:1] in "aeiou" else ""


# ---------------------------------------------------------------- http(s)


async def fetch(url: str, rules: UrlRules, param: str) -> bytes:
    """GET an http(s) file under ``rules`` (see the module docstring)."""
    transport = GuardedTransport(rules.allow_private)
    async with httpx.AsyncClient(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        timeout=rules.timeout,
        headers={"User-Agent": USER_AGENT},
    ) as client:
        try:
            async with asyncio.timeout(rules.timeout):
                return await _follow(client, url, rules, param)
        except TimeoutError:
            raise _unreachable(url, rules, param, f"no answer within {rules.timeout:g} s") from None
        except AddressRefused as exc:
            raise BadRequest(
                f"The {rules.noun} URL '{shown(url)}' was refused: {exc.host} is a private, "
                f"loopback or link-local address ({exc.address}). Set "
                f"allow_private_image_urls to fetch {rules.noun}s from the gateway's own "
                "network.",
                param=param,
                code="image_url_refused",
            ) from None
        except httpx.HTTPError as exc:
            raise _unreachable(url, rules, param, str(exc) or type(exc).__name__) from None


async def _follow(client: httpx.AsyncClient, url: str, rules: UrlRules, param: str) -> bytes:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream("GET", current) as response:
            if response.is_redirect:
                location = response.headers.get("location", "")
                current = urllib.parse.urljoin(current, location)
                if urllib.parse.urlsplit(current).scheme not in ("http", "https"):
                    raise _unreachable(url, rules, param, f"redirected to '{shown(current)}'")
                continue
            if response.status_code != 200:
                why = f"the server answered HTTP {response.status_code}"
                raise _unreachable(url, rules, param, why)
            return await _read_body(response, url, rules, param)
    raise _unreachable(url, rules, param, f"more than {MAX_REDIRECTS} redirects")


async def _read_body(response: httpx.Response, url: str, rules: UrlRules, param: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > rules.max_bytes:
        raise TooLarge(rules, f"at '{shown(url)}'", param)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > rules.max_bytes:
            raise TooLarge(rules, f"at '{shown(url)}'", param)
    if not body:
        raise _unreachable(url, rules, param, "the server sent no data")
    return bytes(body)


def _unreachable(url: str, rules: UrlRules, param: str, why: str) -> BadRequest:
    return BadRequest(
        f"The {rules.noun} URL '{shown(url)}' could not be fetched: {why}.",
        param=param,
        code="image_url_unreachable",
    )


# ---------------------------------------------------------------- local files


def _local_file(path: str, rules: UrlRules, param: str) -> bytes:
    refused = f"{rules.noun}_path_refused"
    if not rules.local_dirs:
        raise BadRequest(
            f"The {rules.noun} path '{shown(path)}' is not allowed: this model reads no local "
            f"files; list their folder in its {rules.local_key}, or send a data: or http(s) URL.",
            param=param,
            code=refused,
        )
    resolved = Path(path).expanduser().resolve()
    if not any(resolved.is_relative_to(folder) for folder in rules.local_dirs):
        raise BadRequest(
            f"The {rules.noun} path '{shown(path)}' is outside the model's {rules.local_key}.",
            param=param,
            code=refused,
        )
    try:
        if resolved.stat().st_size > rules.max_bytes:
            raise TooLarge(rules, f"'{shown(path)}'", param)
        return resolved.read_bytes()
    except OSError as exc:
        raise BadRequest(
            f"The {rules.noun} file '{shown(path)}' cannot be read: {exc.strerror or exc}.",
            param=param,
            code=rules.url_code,
        ) from None
