"""Which model answers (reply/routed.py over pool/routes.py): a route's models in
its strategy's order, the next one tried for a failure its strategy moves on from
(and only then), a session kept on the model that answered it, models of another
kind left out, and the answer named by the model that gave it. The serve, the
choice and the routes are the real ones; the models' workers are scripted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.errors import BadRequest, ModelUnavailable, TooManyRequests
from mlx_gateway.supervisor.reply.routed import MODEL_HEADER, choose

from ..api.fakes import defaults
from .fakes import Round, SayRequest, ScriptedHandle, said
from .gateway import SAY, Exchange, client, gateway, registry_of, say_ask

HELLO = Round(said("hello"))
FAILED_LOAD = ModelUnavailable("model failed to load: out of memory")


def model(name: str, *script: Round, **settings: Any) -> ScriptedHandle:
    return ScriptedHandle(name, config=defaults(**settings), script=list(script))


def route(strategy: str, *models: str, name: str = "r") -> RouteConfig:
    return RouteConfig(name=name, strategy=strategy, models=models)  # type: ignore[arg-type]


async def ask(app: Any, **fields: Any) -> Any:
    """One whole answer of the route ``r``: (status, the answering model's header,
    the body)."""
    async with client(app) as http:
        answer = await http.post(SAY, json={"model": "r", "text": "hi", **fields})
    return answer.status_code, answer.headers.get(MODEL_HEADER), answer.json()


def rejected(exc: BaseException) -> Round:
    return Round(reject=exc)  # type: ignore[arg-type]


async def test_fallback_moves_on_from_a_model_that_cannot_serve() -> None:
    first, second = model("a"), model("b", HELLO, HELLO)
    first.load_error = FAILED_LOAD
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    status, header, body = await ask(app)
    assert (status, header, body[0]["model"]) == (200, "b", "b")  # the dialect names it too
    async with client(app) as http:
        streamed = await http.post(SAY, json={"model": "r", "text": "hi", "stream": True})
    assert streamed.headers[MODEL_HEADER] == "b" and b'"finish": "stop"' in streamed.content


async def test_a_requests_own_fault_is_the_answer_not_a_reason_to_move_on() -> None:
    bad = BadRequest("the image is not an image", param="messages")
    first, second = model("a", rejected(bad)), model("b", HELLO)
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    status, header, body = await ask(app)
    assert status == 400 and body["error"]["message"] == "the image is not an image"
    assert header is None and second.sent == []


async def test_when_every_model_fails_the_last_failure_is_the_answer() -> None:
    first = model("a", rejected(ModelUnavailable("a is broken")))
    second = model("b", rejected(ModelUnavailable("b is broken")))
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    status, _, body = await ask(app)
    assert status == 503 and body["error"]["message"] == "b is broken"


async def test_spillover_moves_on_only_from_a_full_queue() -> None:
    full = TooManyRequests("a", max_concurrency=1, max_queue=0)
    first, second = model("a", rejected(full), rejected(FAILED_LOAD)), model("b", HELLO)
    app = gateway(first, second, routes=[route("spillover", "a", "b")])
    assert (await ask(app))[:2] == (200, "b")
    status, _, body = await ask(app)  # a 503 is the answer: spillover is no fallback
    assert status == 503 and body["error"]["message"] == FAILED_LOAD.message
    assert len(second.sent) == 1


async def test_fallback_also_moves_on_from_a_full_queue() -> None:
    full = TooManyRequests("a", max_concurrency=1, max_queue=0)
    first, second = model("a", rejected(full)), model("b", HELLO)
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    assert (await ask(app))[:2] == (200, "b")


async def test_warm_prefers_a_loaded_model_in_config_order() -> None:
    cold, warm, warm_too = model("a", HELLO), model("b", HELLO), model("c")
    cold.state = "unloaded"
    app = gateway(cold, warm, warm_too, routes=[route("warm", "a", "b", "c")])
    assert (await ask(app))[:2] == (200, "b")  # the first loaded, not the first listed
    warm.state = warm_too.state = "unloaded"
    assert (await ask(app))[:2] == (200, "a")  # none loaded: config order
    assert len(cold.sent) == len(warm.sent) == 1 and warm_too.sent == []


async def test_a_session_stays_on_the_model_that_answered_it_while_it_is_loaded() -> None:
    first = model("a", rejected(FAILED_LOAD), HELLO, HELLO)
    second = model("b", HELLO, HELLO)
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    assert (await ask(app, prompt_cache_key="k"))[1] == "b"  # a failed: b answered k
    assert (await ask(app, prompt_cache_key="k"))[1] == "b"  # k sticks to b
    assert (await ask(app, user="someone else"))[1] == "a"  # another session: config order
    second.state = "unloaded"
    assert (await ask(app, prompt_cache_key="k"))[1] == "a"  # b unloaded: no sticking


async def test_a_session_is_the_users_without_a_prompt_cache_key() -> None:
    first = model("a", rejected(FAILED_LOAD), HELLO)
    second = model("b", HELLO, HELLO)
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    assert (await ask(app, user="u1"))[1] == "b"
    assert (await ask(app, user="u1"))[1] == "b"
    assert (await ask(app, user="u2"))[1] == "a"


async def test_the_next_model_gets_a_turn_of_its_own() -> None:
    first = model("a", rejected(FAILED_LOAD), temperature=0.1)
    second = model("b", HELLO, temperature=0.7)
    app = gateway(first, second, routes=[route("fallback", "a", "b")])
    await ask(app)
    assert first.sent[0].sampling.temperature == 0.1
    assert second.sent[0].sampling.temperature == 0.7  # its own defaults, its own request
    assert second.sent[0].request_id == first.sent[0].request_id  # one request's id


def test_models_of_another_kind_are_left_out_of_a_route() -> None:
    embedder = ScriptedHandle("e", config=model_entry(model_path="e", model_type="embeddings"))
    app = gateway(embedder, model("a"), routes=[route("fallback", "e", "a")])
    req = SayRequest(model="r", text="hi")
    choice = choose(registry_of(app), say_ask(req))
    assert [m.name for m in choice.models] == ["a"]
    assert choice.route is not None and choice.route.name == "r"
    only = gateway(embedder, routes=[route("fallback", "e", name="only")])
    with pytest.raises(BadRequest) as refused:
        choose(registry_of(only), say_ask(SayRequest(model="only", text="hi")))
    assert refused.value.param == "model" and SAY in refused.value.message


def test_a_models_name_is_a_choice_of_that_model_alone() -> None:
    app = gateway(model("a"), model("b"), routes=[route("fallback", "a", "b")])
    choice = choose(registry_of(app), say_ask(SayRequest(model="b", text="hi")))
    assert [m.name for m in choice.models] == ["b"] and choice.route is None


async def test_a_routed_answer_computed_again_stays_on_the_model_that_answered() -> None:
    headers_out = asyncio.Event()
    first = model("a", rejected(FAILED_LOAD))  # a second try here would find no script
    dies = Round(said("lost words"), gate=headers_out, crash_after=1)
    second = model("b", dies, HELLO)
    app = gateway(first, second, routes=[route("fallback", "a", "b")], stream_keepalive=0.1)
    exchange = Exchange(app, {"model": "r", "text": "hi"})
    exchange.answering = headers_out
    await exchange.run()
    head, *events = json.loads(exchange.body)
    assert head["model"] == "b" and events[-1]["finish"] == "stop"
    assert (len(first.sent), len(second.sent)) == (1, 2)
