"""Malformed and hostile requests, generated from the OpenAPI description the gateway
serves (schemathesis) and by hand-written Hypothesis strategies, sent over real TCP
to the real app with fake workers behind it.

The properties: never a 500; every error is OpenAI-shaped; a response to a valid
request matches the described status codes, media types and schemas; and no worker
dies (each model still answers afterwards, none crashed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from ..supervisor.live import LiveGateway

pytestmark = pytest.mark.slow

MODELS = ("fake/alpha", "fake/beta")
JSON_ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/images/generations",
    "/v1/models/fake/alpha/unload",
)
FORM_ENDPOINTS = ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/edits")

SETTINGS = settings(
    deadline=None,
    database=None,
    derandomize=True,  # the same cases on every run: a CI failure reproduces locally
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    models = [{"model_path": MODELS[0], "aliases": ["alpha"]}, {"model_path": MODELS[1]}]
    with LiveGateway(*models, max_body_mb=1.0) as gw:
        yield gw


@pytest.fixture(scope="module")
def client(gateway: LiveGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        yield http


def check_alive(gateway: LiveGateway, http: httpx.Client) -> None:
    """Every model answers a plain request and no worker crashed meanwhile."""
    for name in MODELS:
        body = {"model": name, "messages": [{"role": "user", "content": "still alive"}]}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "still alive "
    for handle in gateway.registry.handles:
        assert handle.crashes == 0, (handle.name, handle.last_error)
        assert handle.state.public != "failed"


def check_error_shape(response: httpx.Response, path: str = "") -> None:
    """A 4xx JSON answer is ``{"error": {"message", "type", "param", "code"}}`` (the
    Anthropic endpoints: ``{"type": "error", "error": {"type", "message"}}``; Ollama's
    ``/api/…``: ``{"error": "message"}``; the MCP server's ``/mcp``: a JSON-RPC error,
    ``{"jsonrpc": "2.0", "id", "error": {"code", "message"}}``)."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400 and path == "/mcp":
        body = response.json()
        assert body["jsonrpc"] == "2.0" and "id" in body, body
        assert isinstance(body["error"]["code"], int), body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return
    if response.status_code >= 400 and path.startswith("/api/"):  # Ollama's own shape
        error = response.json()["error"]
        assert isinstance(error, str) and error, error
        return
    if response.status_code >= 400:
        error = response.json()["error"]
        expected = {"message", "type"} if path.startswith("/v1/messages") else {
            "message", "type", "param", "code"
        }  # fmt: skip
        assert set(error) >= expected, error
        assert isinstance(error["message"], str) and error["message"]


# ---------------------------------------------------------------- from /openapi.json


def operations(gateway: LiveGateway) -> list[Any]:
    # An explicit config: no search of the file system for a schemathesis.toml.
    config = schemathesis.config.SchemathesisConfig()
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json", config=config)
    return [result.ok() for result in schema.get_all_operations()]


def has_inputs(operation: Any) -> bool:
    return bool(operation.body) or any(True for _ in operation.path_parameters)


def test_openapi_operations_positive(gateway: LiveGateway, client: httpx.Client) -> None:
    """Schema-valid requests for every described operation: answered without a
    server error, in the described status codes, media types and schemas."""
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    sent = 0
    for operation in operations(gateway):
        examples = 20 if has_inputs(operation) else 1

        @settings(SETTINGS, max_examples=examples)
        @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
        def run(case: Any) -> None:
            nonlocal sent
            response = case.call(base_url=gateway.url, timeout=30)
            sent += 1
            case.validate_response(response, checks=checks)

        run()
    assert sent > 100
    check_alive(gateway, client)


def test_openapi_operations_negative(gateway: LiveGateway, client: httpx.Client) -> None:
    """Schema-violating bodies: each is rejected with a 4xx, never accepted or a 500."""
    checks = [not_a_server_error, negative_data_rejection]
    sent = 0
    for operation in operations(gateway):
        if not operation.body:
            continue  # path parameters are free strings: nothing to violate

        @settings(SETTINGS, max_examples=25)
        @given(case=operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
        def run(case: Any) -> None:
            nonlocal sent
            response = case.call(base_url=gateway.url, timeout=30)
            sent += 1
            case.validate_response(response, checks=checks)
            check_error_shape(
                httpx.Response(response.status_code, content=response.content),
                case.operation.path,
            )

        run()
    assert sent > 100
    check_alive(gateway, client)


# ---------------------------------------------------------------- hand-written hostility

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def valid_body(path: str) -> dict[str, Any]:
    if path == "/v1/chat/completions":
        return {"model": MODELS[0], "messages": [{"role": "user", "content": "a b"}]}
    if path == "/v1/completions":
        return {"model": MODELS[0], "prompt": "a b"}
    if path == "/v1/images/generations":
        return {"model": MODELS[0], "prompt": "a cat"}
    return {"model": MODELS[0], "input": "a b"}


@st.composite
def mutated_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid body with fields replaced, added or removed, at any depth."""
    path = draw(st.sampled_from(JSON_ENDPOINTS[:4]))
    body: Any = valid_body(path)
    for _ in range(draw(st.integers(1, 4))):
        target = body
        if isinstance(body.get("messages"), list) and draw(st.booleans()):
            target = body["messages"][0]
        key = draw(
            st.sampled_from(
                [
                    *target,
                    "stream",
                    "max_tokens",
                    "n",
                    "stop",
                    "seed",
                    "temperature",
                    "chat_template_kwargs",
                    "input",
                    "extra",
                ]
            )
        )
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(json_values)
    return path, json.dumps(body, allow_nan=True).encode()


@st.composite
def raw_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """Arbitrary bytes or arbitrary JSON, to any JSON endpoint."""
    path = draw(st.sampled_from(JSON_ENDPOINTS))
    if draw(st.booleans()):
        return path, draw(st.binary(max_size=300))
    return path, json.dumps(draw(json_values)).encode()


@settings(SETTINGS, max_examples=120)
@given(request=st.one_of(mutated_bodies(), raw_bodies()))
def test_hostile_json_bodies(
    gateway: LiveGateway, client: httpx.Client, request: tuple[str, bytes]
) -> None:
    path, body = request
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    check_error_shape(r)


@settings(SETTINGS, max_examples=40)
@given(
    path=st.sampled_from(FORM_ENDPOINTS),
    fields=st.dictionaries(
        st.sampled_from(["model", "prompt", "language", "temperature", "response_format",
                         "timestamp_granularities[]", "stream", "size", "n", "x"]),
        st.one_of(st.sampled_from([*MODELS, "alpha", "true", "-1", "1e999", "srt"]), st.text()),
        max_size=5,
    ),
    file_field=st.sampled_from(["file", "image", "image[]", "mask", "other"]),
    data=st.binary(max_size=200),
)  # fmt: skip
def test_hostile_forms(
    gateway: LiveGateway,
    client: httpx.Client,
    path: str,
    fields: dict[str, str],
    file_field: str,
    data: bytes,
) -> None:
    r = client.post(path, data=fields, files={file_field: ("x.bin", data)})
    check_error_shape(r)


SAY = '"messages": [{"role": "user", "content": '
HOSTILE: list[tuple[str, bytes | str]] = [
    ("empty", b""),
    ("null", b"null"),
    ("array", b"[]"),
    ("bom", "\ufeff" + json.dumps(valid_body("/v1/chat/completions"))),
    ("invalid utf-8", b'{"model": "\xff\xfe", "messages": []}'),
    ("lone surrogate", '{"model": "fake/alpha", ' + SAY + r'"\ud800"}]}'),
    ("nul bytes", '{"model": "fake/alpha", ' + SAY + r'"a\u0000b"}]}'),
    ("deep nesting", "[" * 100_000 + "]" * 100_000),
    ("deep object", '{"a":' * 50_000 + "1" + "}" * 50_000),
    ("huge exponent", '{"model": "fake/alpha", "prompt": "x", "temperature": 1e999}'),
    ("nan", '{"model": "fake/alpha", "prompt": "x", "temperature": NaN}'),
    ("huge int", '{"model": "fake/alpha", "prompt": "x", "max_tokens": ' + "9" * 5000 + "}"),
    ("seed 2**64", '{"model": "fake/alpha", "prompt": "x", "seed": 18446744073709551616}'),
    ("negative seed", '{"model": "fake/alpha", "prompt": "x", "seed": -1}'),
    ("top_k 2**64", '{"model": "fake/alpha", "prompt": "x", "top_k": 18446744073709551616}'),
    ("token id 2**40", '{"model": "fake/alpha", "prompt": [1099511627776]}'),
    ("kwargs 2**70", '{"model": "fake/alpha", "messages": [{"role": "user", "content": "x"}], '
                     '"chat_template_kwargs": {"n": 1180591620717411303424}}'),
    ("duplicate keys", '{"model": "nope", "model": "fake/alpha", "prompt": "dup keys"}'),
    ("model object", '{"model": {"$ne": 1}, "prompt": "x"}'),
    ("long model", json.dumps({"model": "m" * 100_000, "prompt": "x"})),
    ("many messages", json.dumps({"model": "fake/alpha", "messages": [
        {"role": "user", "content": "x"}] * 20_000})),
    ("unknown part", '{"model": "fake/alpha", "messages": [{"role": "user", "content": '
                     '[{"type": "video", "video": 1}]}]}'),
    ("trailing garbage", '{"model": "fake/alpha", "prompt": "x"} {"more": 1}'),
    ("just over the cap", '{"model": "fake/alpha", "prompt": "' + "x" * (1 << 20) + '"}'),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body"), HOSTILE, ids=[name for name, _ in HOSTILE])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_hostile_bodies(client: httpx.Client, path: str, name: str, body: bytes | str) -> None:
    content = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    check_error_shape(r)
    if name == "just over the cap":
        assert r.status_code == 413
    if name == "duplicate keys" and path == "/v1/completions":
        assert r.status_code == 200  # the last value wins, as in JSON.parse


def test_hostile_headers_and_methods(client: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/chat/completions"),
        ("DELETE", "/v1/models"),
        ("PUT", "/metrics"),
        ("GET", "/nope"),
        ("GET", "/v1/models/%00"),
    ]:
        check_error_shape(client.request(method, path))  # fmt: skip
    body = json.dumps(valid_body("/v1/completions"))
    for headers in [
        {"content-type": "text/plain"},
        {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "multipart/form-data; boundary=x"},
        {"authorization": "Bearer " + "x" * 5000},
        {"x-api-key": ""},
    ]:
        check_error_shape(client.post("/v1/completions", content=body, headers=headers))


def test_still_alive_after_the_hostility(gateway: LiveGateway, client: httpx.Client) -> None:
    check_alive(gateway, client)
