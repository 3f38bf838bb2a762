"""Grammar-constrained decoding and log-probabilities in the lm backend, on the tiny
random llama: every tool-call format's forced-call grammar makes the random model
write a call that the gateway's parser for that format reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlx_gateway.protocol.messages import (
    Batch,
    Constraint,
    CountTokens,
    Done,
    Generate,
    Reply,
    SamplingParams,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.engine.parsers.formats import TOOL_FORMATS
from mlx_gateway.supervisor.engine.parsers.grammars import json_document
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ToolCallStream
from mlx_gateway.workers.lm.backend import LmBackend
from mlx_gateway.workers.lm.logprobs import FLOOR, LogprobTrack
from mlx_gateway.workers.runtime.contract import RequestError

pytestmark = pytest.mark.slow

TOOLS = [
    Function(
        "set_alarm",
        {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 6},
                "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                "loud": {"type": "boolean"},
            },
            "required": ["label", "hour", "loud"],
            "additionalProperties": False,
        },
    ),
    Function("stop_alarm", {"type": "object", "properties": {}, "additionalProperties": False}),
]


@pytest.fixture(scope="module")
def lm(tiny_lm_path: Path) -> tuple[LmBackend, list[Reply]]:
    replies: list[Reply] = []
    spec = WorkerSpec(
        worker_id="w",
        kind="lm",
        model_path=str(tiny_lm_path),
        served_model_name="t",
        max_concurrency=8,
    )
    backend = LmBackend()
    backend.load(spec, replies.append)
    return backend, replies


def generate(lm: Any, requests: list[Generate]) -> dict[str, tuple[str, Done, list[Any]]]:
    backend, replies = lm
    replies.clear()
    for request in requests:
        backend.submit(request, [])
    while backend.has_work():
        backend.step()
    texts: dict[str, str] = {r.request_id: "" for r in requests}
    logprobs: dict[str, list[Any]] = {r.request_id: [] for r in requests}
    done: dict[str, Done] = {}
    for reply in replies:
        if isinstance(reply, Batch):
            for chunk in reply.chunks:
                texts[chunk.request_id] += chunk.text
                logprobs[chunk.request_id] += chunk.logprobs
        elif isinstance(reply, Done):
            done[reply.request_id] = reply
    return {k: (texts[k], done[k], logprobs[k]) for k in texts}


def chat(request_id: str, **fields: Any) -> Generate:
    sampling = fields.pop("sampling", SamplingParams(max_tokens=300, temperature=1.0))
    return Generate(
        request_id=request_id,
        messages=[{"role": "user", "content": "hi"}],
        sampling=sampling,
        **fields,
    )


FORCEABLE = [name for name, fmt in TOOL_FORMATS.items() if fmt.grammar(TOOLS, False)]


def test_forced_calls_in_every_format_parse_back(lm: Any) -> None:
    requests = []
    for name in FORCEABLE:
        for seed in (1, 2):
            grammar = TOOL_FORMATS[name].grammar(TOOLS, False)
            assert grammar is not None
            sampling = SamplingParams(max_tokens=300, temperature=1.0, seed=seed)
            requests.append(
                chat(f"{name}/{seed}", sampling=sampling, constraint=Constraint(grammar, "tools"))
            )
    results = generate(lm, requests)
    for request_id, (text, done, _) in results.items():
        name = request_id.split("/")[0]
        assert done.finish_reason == "stop", (request_id, text)
        stream = ToolCallStream(TOOL_FORMATS[name], TOOLS)
        events = stream.feed(text) + stream.finish()
        (call,) = events  # exactly one call and no text around it
        assert not isinstance(call, str), (request_id, text)
        arguments = json.loads(call.arguments)
        if call.name == "set_alarm":
            assert set(arguments) == {"label", "hour", "loud"}, (request_id, text)
            assert 0 <= arguments["hour"] <= 23 and len(arguments["label"]) <= 6
            assert isinstance(arguments["loud"], bool)
        else:
            assert (call.name, arguments) == ("stop_alarm", {})


def test_json_schema_and_invalid_grammars(lm: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 99}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    constraint = Constraint(json_document(schema), "response_format.json_schema.schema")
    results = generate(lm, [chat(f"j{i}", constraint=constraint) for i in range(4)])
    for text, done, _ in results.values():
        assert done.finish_reason == "stop"
        value = json.loads(text)
        assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and value["n"] <= 99

    backend, _ = lm
    bad = Constraint('start: %json {"type": "nonsense"}', "response_format.json_schema.schema")
    with pytest.raises(RequestError) as info:
        backend.submit(chat("bad", constraint=bad), [])
    assert info.value.param == "response_format.json_schema.schema"
    with pytest.raises(RequestError):
        backend.submit(chat("bad2", constraint=Constraint("start: ((", "tools")), [])
    assert not backend.has_work()


def test_a_special_token_literal_becomes_that_token(lm: Any) -> None:
    # "<|im_start|>" is a special token of the tiny tokenizer: as a quoted literal it
    # could never be produced; the worker turns it into a reference to the token.
    grammar = 'start: "ab" "<|im_start|>" "c"'
    results = generate(lm, [chat("special", constraint=Constraint(grammar))])
    text, done, _ = results["special"]
    assert done.finish_reason == "stop"
    assert text == "ab<|im_start|>c"


def test_logprobs_of_a_batch_join_to_each_text(lm: Any) -> None:
    requests = [
        chat(
            f"l{i}",
            logprobs=2,
            sampling=SamplingParams(max_tokens=30, temperature=1.0, seed=i, stop=["e", "o"]),
        )
        for i in range(4)
    ]
    for text, _, entries in generate(lm, requests).values():
        assert "".join(e.text for e in entries) == text
        assert all(e.logprob <= 0 and len(e.top) == 2 for e in entries)


def test_count_tokens(lm: Any) -> None:
    backend, replies = lm
    (_, generated, _) = generate(lm, [chat("g", sampling=SamplingParams(max_tokens=1))])["g"]
    backend.submit(CountTokens(request_id="c", messages=[{"role": "user", "content": "hi"}]), [])
    counted = replies[-1]
    assert isinstance(counted, Done) and counted.finish_reason == "counted"
    assert counted.usage.prompt_tokens == generated.usage.prompt_tokens > 0
    assert not backend.has_work()


class _Tokenizer:
    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + i) for i in ids)


def test_logprob_track_clips_at_a_stop() -> None:
    track = LogprobTrack(_Tokenizer(), top=1)
    logprobs = mx.log(mx.array([0.5, 0.25, 0.25, 0.0]))
    track.add(0, logprobs, "ab")  # text sent only once the whole token went out
    assert track.release(1, final=False) == []
    track.add(1, logprobs, "")  # part of a character: waits for the next token
    track.add(2, logprobs, "cd")
    out = track.release(2, final=False)  # "ab" and "c" went out
    assert [e.text for e in out] == ["ab", ""]
    assert out[0].top == [("a", pytest.approx(out[0].logprob))]
    track.add(3, logprobs, "ef")  # a stop string cut the text right after "cde"
    out = track.release(2, final=True)
    assert [e.text for e in out] == ["cd", "e"]
    assert out[1].logprob == FLOOR  # log(0): JSON has no -inf
