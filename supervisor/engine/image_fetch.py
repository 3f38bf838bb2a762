"""The bytes behind an image URL of a chat request: ``data:`` URLs and http(s) fetches.

The gateway fetches http(s) images itself (the worker never touches the network),
with three guards, each a client error that names the URL and the request field:

* size: a file larger than the model's ``max_image_mb`` is refused with 413, from
  ``Content-Length`` before the body, or while counting the body as it arrives;
* time: the whole fetch, redirects included, must end within the model's
  ``image_fetch_timeout``;
* address: unless ``allow_private_image_urls`` is set, no connection is made to a
  loopback, private, link-local or otherwise non-global address. The check runs at
  connect time on the addresses the host name resolved to, and the connection goes
  to an address that passed it (so DNS cannot answer differently in between); it
  covers every redirect hop, which are followed by hand (at most
  :data:`MAX_REDIRECTS`), and proxies from the environment are not used. The address
  classes and the connect-time guard are the tools' (:mod:`..tools.safety`).

The content is not inspected here: the worker decodes it and answers 400 for a
file that is not an image.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

import httpx

from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.tools.safety import AddressRefused, GuardedTransport

MIB = 1 << 20
MAX_REDIRECTS = 3
USER_AGENT = "mlx-gateway (image fetch)"
SHOWN_URL_CHARS = 120
"""Longer URLs (``data:`` URLs above all) are shortened in messages."""


@dataclass(frozen=True)
class ImagePolicy:
    """How a model's image URLs are read."""

    max_bytes: int = 20 * MIB
    timeout: float = 10.0
    allow_private: bool = False


class ImageSettings(Protocol):
    """An entry that reads image URLs (vlm and embeddings entries)."""

    @property
    def max_image_mb(self) -> float: ...
    @property
    def image_fetch_timeout(self) -> float: ...
    @property
    def allow_private_image_urls(self) -> bool | None: ...


def policy_of(model: ImageSettings, allow_private_default: bool) -> ImagePolicy:
    """How ``model``'s image URLs are read: its caps, and its own
    ``allow_private_image_urls`` else the server's (``allow_private_default``)."""
    allow_private = model.allow_private_image_urls
    return ImagePolicy(
        max_bytes=int(model.max_image_mb * MIB),
        timeout=model.image_fetch_timeout,
        allow_private=allow_private_default if allow_private is None else allow_private,
    )


class ImageTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"

    def __init__(self, what: str, limit: int, param: str) -> None:
        super().__init__(
            f"The image {what} is too large: the limit is {limit / MIB:g} MiB (max_image_mb).",
            param=param,
            code="image_too_large",
        )


def shown(url: str) -> str:
    """``url`` shortened for an error message."""
    if len(url) <= SHOWN_URL_CHARS:
        return url
    return url[: SHOWN_URL_CHARS - 1] + "…"


async def read_image_url(url: str, policy: ImagePolicy, param: str) -> bytes:
    """The file behind ``url`` (``data:``, ``http:`` or ``https:``).

    ``param`` is the request field holding the URL (for errors). Raises
    :class:`~.errors.BadRequest` (malformed, unreachable, refused, not found,
    timed out) or :class:`ImageTooLarge`."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return decode_data_url(url, policy.max_bytes, param)
    if scheme in ("http", "https"):
        return await fetch(url, policy, param)
    raise BadRequest(
        f"The image URL '{shown(url)}' is not supported: use a data: URL (base64) or an "
        "http(s) URL.",
        param=param,
        code="invalid_image_url",
    )


def decode_data_url(url: str, max_bytes: int, param: str) -> bytes:
    """The bytes of a ``data:[<media type>][;base64],<data>`` URL."""
    header, sep, data = url.partition(",")
    if not sep:
        raise BadRequest(
            f"The data URL '{shown(url)}' has no ',' before its data.",
            param=param,
            code="invalid_image_url",
        )
    media_type = header[5:].split(";", 1)[0].strip().lower()
    if media_type and not media_type.startswith("image/"):
        raise BadRequest(
            f"The data URL's media type '{media_type}' is not an image type (image/…).",
            param=param,
            code="invalid_image_url",
        )
    if not header.lower().endswith(";base64"):
        raw = urllib.parse.unquote_to_bytes(data)
    else:
        compact = "".join(data.split())  # clients wrap long base64 in lines
        if len(compact) // 4 * 3 > max_bytes + 2:  # refuse before decoding
            raise ImageTooLarge("in the data URL", max_bytes, param)
        try:
            raw = base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(
                "The data URL's image is not valid base64.", param=param, code="invalid_image_url"
            ) from None
    if not raw:
        raise BadRequest("The data URL holds no data.", param=param, code="invalid_image_url")
    if len(raw) > max_bytes:
        raise ImageTooLarge("in the data URL", max_bytes, param)
    return raw


# ---------------------------------------------------------------- http(s)


async def fetch(url: str, policy: ImagePolicy, param: str) -> bytes:
    """GET an http(s) image under ``policy`` (see the module docstring)."""
    transport = GuardedTransport(policy.allow_private)
    async with httpx.AsyncClient(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        timeout=policy.timeout,
        headers={"User-Agent": USER_AGENT, "Accept": "image/*"},
    ) as client:
        try:
            async with asyncio.timeout(policy.timeout):
                return await _follow(client, url, policy, param)
        except TimeoutError:
            raise _unreachable(url, param, f"no answer within {policy.timeout:g} s") from None
        except AddressRefused as exc:
            raise BadRequest(
                f"The image URL '{shown(url)}' was refused: {exc.host} is a private, "
                f"loopback or link-local address ({exc.address}). Set "
                "allow_private_image_urls to fetch images from the gateway's own network.",
                param=param,
                code="image_url_refused",
            ) from None
        except httpx.HTTPError as exc:
            raise _unreachable(url, param, str(exc) or type(exc).__name__) from None


async def _follow(client: httpx.AsyncClient, url: str, policy: ImagePolicy, param: str) -> bytes:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream("GET", current) as response:
            if response.is_redirect:
                location = response.headers.get("location", "")
                current = urllib.parse.urljoin(current, location)
                if urllib.parse.urlsplit(current).scheme not in ("http", "https"):
                    raise _unreachable(url, param, f"redirected to '{shown(current)}'")
                continue
            if response.status_code != 200:
                raise _unreachable(url, param, f"the server answered HTTP {response.status_code}")
            return await _read_body(response, url, policy.max_bytes, param)
    raise _unreachable(url, param, f"more than {MAX_REDIRECTS} redirects")


async def _read_body(response: httpx.Response, url: str, limit: int, param: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ImageTooLarge(f"at '{shown(url)}'", limit, param)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise ImageTooLarge(f"at '{shown(url)}'", limit, param)
    if not body:
        raise _unreachable(url, param, "the server sent no data")
    return bytes(body)


def _unreachable(url: str, param: str, why: str) -> BadRequest:
    return BadRequest(
        f"The image URL '{shown(url)}' could not be fetched: {why}.",
        param=param,
        code="image_url_unreachable",
    )
