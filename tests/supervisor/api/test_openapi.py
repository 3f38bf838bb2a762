"""``GET /openapi.json``: the routes, the bodies (from the msgspec Structs), and the
agreement between the described schema and what the gateway accepts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema_rs
import msgspec
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.api.openapi import DECLARED
from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import decode
from mlx_gateway.supervisor.http.openapi import ERROR, OpenApi, Operation

from ..fakes import fake_command, fake_config

MODEL = "fake/ok"


async def served(**server: Any) -> AsyncIterator[dict[str, Any]]:
    app: Starlette = create_app(
        fake_config({"model_path": MODEL, "aliases": ["ok"]}, **server), command=fake_command
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            r = await http.get("/openapi.json", headers={"x-api-key": "k"})
            assert r.status_code == 200
            yield r.json()


@pytest.fixture
async def doc() -> AsyncIterator[dict[str, Any]]:
    async for document in served():
        yield document


def request_schema(doc: dict[str, Any], path: str) -> Any:
    """A validator of ``path``'s JSON request body, with the document's components."""
    ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = {**ref, "components": doc["components"]}
    return jsonschema_rs.Draft202012Validator(schema)


def test_schema_document(doc: dict[str, Any]) -> None:
    assert doc["openapi"] == "3.1.0"
    paths = doc["paths"]
    for path, method in [
        ("/v1/chat/completions", "post"),
        ("/v1/completions", "post"),
        ("/v1/embeddings", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model_id}", "get"),
        ("/v1/models/{model_id}/load", "post"),
        ("/health", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
    ]:
        assert method in paths[path], path
    chat = paths["/v1/chat/completions"]["post"]
    assert chat["operationId"] == "createChatCompletion"
    ok = chat["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/event-stream"}
    assert chat["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/Error"
    )
    assert paths["/v1/models/{model_id}"]["get"]["parameters"][0]["name"] == "model_id"
    request = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert set(request["required"]) == {"model", "messages"}
    assert request["properties"]["model"]["enum"] == [MODEL, "ok"]
    assert "securitySchemes" not in doc["components"]
    assert "security" not in chat


async def test_security_described_when_keys_are_set() -> None:
    async for doc in served(api_keys=["k"]):
        schemes = doc["components"]["securitySchemes"]
        assert schemes["bearer"] == {"type": "http", "scheme": "bearer"}
        assert schemes["apiKey"]["name"] == "x-api-key"
        chat = doc["paths"]["/v1/chat/completions"]["post"]
        assert chat["security"] == [{"bearer": []}, {"apiKey": []}]
        assert "401" in chat["responses"]
        assert "security" not in doc["paths"]["/health"]["get"]


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        {"model": "ok", "messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]},
                                     {"role": "user", "content": "y"}],
         "temperature": 0.5, "max_tokens": 3, "stop": ["a"], "stream": True},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]},
        {"model": MODEL, "messages": [{"role": "user"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 3},
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
        {"model": MODEL, "messages": [{"role": "tool", "content": "x"}]},
    ],
)  # fmt: skip
def test_described_schema_agrees_with_the_decoder(doc: dict[str, Any], body: Any) -> None:
    """A body the description accepts is one the gateway's decoder accepts, and
    the other way round (``model`` aside: the decoder leaves names to the registry)."""
    described = request_schema(doc, "/v1/chat/completions").is_valid(body)
    try:
        decode(msgspec.json.encode(body), ChatCompletionRequest)
        decoded = True
    except BadRequest:
        decoded = False
    assert described == decoded


def test_every_declared_operation_is_a_route_of_the_app(doc: dict[str, Any]) -> None:
    """Each surface declares its own operations (``api/<surface>/openapi.py``): one
    whose route is gone or renamed would be left out of the description unseen."""
    described = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    assert set(DECLARED.operations) - described == set()
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_an_operation_declared_twice_is_refused() -> None:
    one = OpenApi({("GET", "/x"): Operation("x", "X.")})
    with pytest.raises(ValueError, match=r"operation declared twice: \('GET', '/x'\)"):
        OpenApi.gather(one, one)
    with pytest.raises(ValueError, match="component declared twice: Error"):
        OpenApi.gather(ERROR, ERROR)
