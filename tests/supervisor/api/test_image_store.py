"""The URL store and the request checks of the image endpoints, without a worker."""

from __future__ import annotations

import httpx
import msgspec
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.api.images.schemas import (
    ImageEditForm,
    ImageGenerationRequest,
    check_fields,
    parse_edit_form,
)
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.auth import AuthMiddleware
from mlx_gateway.supervisor.http.image_store import ImageStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_store_keeps_images_until_they_expire() -> None:
    clock = Clock()
    store = ImageStore(max_bytes=1000, ttl=60, clock=clock)
    key = store.put(b"png bytes", "image/png")
    other = store.put(b"more", "image/png")
    assert key != other and len(key) >= 20  # unguessable
    item = store.get(key)
    assert item is not None and (item.data, item.media_type) == (b"png bytes", "image/png")
    clock.now += 59
    assert store.expires_in(key) == pytest.approx(1)
    assert store.get(key) is not None
    clock.now += 1
    assert store.get(key) is None and store.get(other) is None
    assert (len(store), store.bytes) == (0, 0)
    assert store.get("unknown") is None


def test_store_drops_the_oldest_when_full() -> None:
    store = ImageStore(max_bytes=10, ttl=60, clock=Clock())
    first = store.put(b"aaaa", "image/png")
    second = store.put(b"bbbb", "image/png")
    third = store.put(b"cccc", "image/png")  # 12 bytes > 10: the first goes
    assert store.get(first) is None
    assert store.get(second) is not None and store.get(third) is not None
    assert store.bytes == 8
    huge = store.put(b"x" * 50, "image/png")  # bigger than the store: kept alone
    assert store.get(huge) is not None and len(store) == 1


def request(**fields: object) -> ImageGenerationRequest:
    body = {"model": "m", "prompt": "a cat", **fields}
    return msgspec.json.decode(msgspec.json.encode(body), type=ImageGenerationRequest)


@pytest.mark.parametrize(
    ("size", "expected"),
    [(None, None), ("auto", None), ("16x32", (16, 32)), ("1024X768", (1024, 768))],
)
def test_sizes(size: str | None, expected: tuple[int, int] | None) -> None:
    assert check_fields(request(size=size), 16, 2048 * 2048) == expected


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"size": "1000x1000"}, "size", "multiples of 16 (e.g. '992x992')"),
        ({"size": "0x16"}, "size", "WIDTHxHEIGHT"),
        ({"size": "16 by 16"}, "size", "WIDTHxHEIGHT"),
        ({"size": "4096x4096"}, "size", "larger than this model allows"),
        ({"prompt": ""}, "prompt", "empty"),
        ({"background": "transparent"}, "background", "not supported"),
        ({"stream": True, "response_format": "url"}, "response_format", "stream"),
    ],
)
def test_bad_fields_name_the_field(fields: dict[str, object], param: str, words: str) -> None:
    with pytest.raises(BadRequest) as info:
        check_fields(request(**fields), 16, 2048 * 2048)
    assert info.value.param == param
    assert words in info.value.message


def test_edit_form_fields_are_converted_from_strings() -> None:
    form = parse_edit_form(
        {
            "model": ["m"],
            "prompt": ["make it red", "ignored second value"],
            "n": ["2"],
            "seed": ["42"],
            "guidance": ["3.5"],
            "stream": ["true"],
            "input_fidelity": ["high"],
            "unknown_field": ["kept out"],
        }
    )
    assert isinstance(form, ImageEditForm)
    assert (form.prompt, form.n, form.seed, form.guidance, form.stream) == (
        "make it red",
        2,
        42,
        3.5,
        True,
    )
    with pytest.raises(BadRequest) as info:
        parse_edit_form({"model": ["m"], "prompt": ["x"], "n": ["many"]})
    assert info.value.param == "n"
    with pytest.raises(BadRequest) as info:
        parse_edit_form({"model": ["m"]})
    assert info.value.param == "prompt"


async def test_image_files_are_capability_urls_without_a_key() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("ok")(scope, receive, send)

    guarded = AuthMiddleware(app, api_keys=["sk-k"], admin_keys=[])
    transport = httpx.ASGITransport(guarded)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        assert (await http.get("/v1/images/files/abc.png")).status_code == 200
        assert (await http.post("/v1/images/files/abc.png")).status_code == 401
        assert (await http.post("/v1/images/generations")).status_code == 401
        assert (await http.get("/v1/images/files")).status_code == 401
        keyed = await http.post("/v1/images/generations", headers={"authorization": "Bearer sk-k"})
        assert keyed.status_code == 200
