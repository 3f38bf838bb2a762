"""Request decoding: field paths in 400s, ranges, ignored unknowns, content parts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from mlx_gateway.protocol.messages import SamplingParams
from mlx_gateway.supervisor.api.completions.routes import single_prompt
from mlx_gateway.supervisor.engine.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    check_common,
    messages_to_builtins,
)
from mlx_gateway.supervisor.engine.sampling import sampling_params
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.body import decode

USER = {"role": "user", "content": "hi"}


def chat(**fields: Any) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [USER], **fields}
    return decode(msgspec.json.encode(body), ChatCompletionRequest)


def chat_error(body: Any) -> BadRequest:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    with pytest.raises(BadRequest) as info:
        decode(raw, ChatCompletionRequest)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    return info.value


def test_minimal_chat_request() -> None:
    req = chat()
    assert req.model == "m"
    assert req.stream is False
    assert messages_to_builtins(req.messages) == [USER]


def test_every_role_and_content_parts_are_kept() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "assistant", "content": "done", "name": "bot"},
    ]
    req = chat(messages=messages)
    out = messages_to_builtins(req.messages)
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[1] == {"role": "developer", "content": [{"type": "text", "text": "dev"}]}
    assert out[2]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert out[3] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": "{}"}, "type": "function"}
        ],
    }
    assert out[4] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
    assert out[5] == {"role": "assistant", "content": "done", "name": "bot"}


def test_unknown_fields_are_ignored_at_top_level_and_in_messages() -> None:
    req = chat(
        messages=[{"role": "user", "content": "hi", "refusal": None, "whatever": 1}],
        user="u1",
        metadata={"k": "v"},
        logprobs=False,
        tools=[{"type": "function", "function": {"name": "f"}}],
        response_format={"type": "text"},
        store=False,
        service_tier="auto",
    )
    assert messages_to_builtins(req.messages) == [USER]
    assert req.user == "u1"


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"messages": [USER]}, "model", "Missing required parameter: 'model'"),
        ({"model": "m"}, "messages", "Missing required parameter: 'messages'"),
        ({"model": 3, "messages": [USER]}, "model", "Invalid value for 'model'"),
        ({"model": "m", "messages": []}, "messages", "length >= 1"),
        (
            {"model": "m", "messages": [{"role": "bot", "content": "x"}]},
            "messages[0].role",
            "'bot'",
        ),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role", "Missing"),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content", "Missing"),
        (
            {"model": "m", "messages": [USER, {"role": "user", "content": 5}]},
            "messages[1].content",
            "Invalid value for 'messages[1].content'",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "messages[0].content[0].type",
            "'audio'",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            "Missing",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "",
        ),
        ({"model": "m", "messages": [USER], "stream": "yes"}, "stream", "Expected `bool"),
        ({"model": "m", "messages": [USER], "stop": [1]}, "stop[0]", ""),
        (
            {"model": "m", "messages": [USER], "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
            "",
        ),
    ],
)
def test_type_errors_name_the_field(body: Any, param: str, needle: str) -> None:
    error = chat_error(body)
    assert error.param == param
    assert needle in error.message
    assert error.body()["error"]["param"] == param


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.01),
        ("top_p", 0),
        ("top_p", 1.5),
        ("top_k", -2),
        ("min_p", 1.1),
        ("max_tokens", 0),
        ("max_completion_tokens", 0),
        ("repetition_penalty", 0),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("n", 0),
        ("temperature", "hot"),
        ("seed", 1.5),
    ],
)
def test_out_of_range_values_name_the_param(field: str, value: Any) -> None:
    error = chat_error({"model": "m", "messages": [USER], field: value})
    assert error.param == field
    assert f"'{field}'" in error.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0),
        ("temperature", 2),
        ("top_p", 1),
        ("top_k", -1),
        ("top_k", 0),
        ("min_p", 0),
        ("max_tokens", 1),
        ("presence_penalty", -2),
        ("temperature", None),
    ],
)
def test_boundary_values_are_accepted(field: str, value: Any) -> None:
    chat(**{field: value})


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"model": "m",}'])
def test_invalid_json_is_a_400(raw: bytes) -> None:
    error = chat_error(raw)
    assert "not valid JSON" in error.message
    assert error.param is None


def test_a_body_that_is_not_an_object() -> None:
    error = chat_error(b"[1, 2]")
    assert error.param is None
    assert "Expected `object`" in error.message


def test_stop_more_than_four_is_fine() -> None:
    assert chat(stop=["a", "b", "c", "d", "e"]).stop == ["a", "b", "c", "d", "e"]


# ---------------------------------------------------------------- checks across fields


def test_n_other_than_one_is_rejected_for_legacy_completions() -> None:
    check_common(chat(n=2))  # chat completions run n choices
    check_common(completion(prompt="x", n=1))
    with pytest.raises(BadRequest) as info:
        check_common(completion(prompt="x", n=2))
    assert info.value.param == "n"


def test_stream_options_need_stream() -> None:
    check_common(chat(stream=True, stream_options={"include_usage": True}))
    check_common(chat(stream=False, stream_options=None))
    with pytest.raises(BadRequest) as info:
        check_common(chat(stream_options={"include_usage": True}))
    assert info.value.param == "stream_options"


# ---------------------------------------------------------------- sampling defaults

NO_DEFAULTS = SimpleNamespace(
    max_tokens=None, temperature=None, top_p=None, top_k=None, min_p=None, repetition_penalty=None
)
DEFAULTS = SimpleNamespace(
    max_tokens=100, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1
)


def test_sampling_without_anything_is_the_protocol_default() -> None:
    assert sampling_params(chat(), NO_DEFAULTS) == SamplingParams()


def test_sampling_falls_back_to_the_model_defaults() -> None:
    params = sampling_params(chat(), DEFAULTS)
    assert params == SamplingParams(
        max_tokens=100, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1
    )


def test_sampling_request_values_win() -> None:
    req = chat(
        max_tokens=5,
        temperature=0,
        top_p=0.5,
        top_k=-1,
        min_p=0.0,
        repetition_penalty=1.0,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        seed=7,
        stop="END",
    )
    params = sampling_params(req, DEFAULTS)
    assert params == SamplingParams(
        max_tokens=5,
        temperature=0.0,
        top_p=0.5,
        top_k=0,
        min_p=0.0,
        repetition_penalty=1.0,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        seed=7,
        stop=["END"],
    )


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    req = chat(max_tokens=5, max_completion_tokens=9)
    assert sampling_params(req, DEFAULTS).max_tokens == 9
    assert sampling_params(chat(max_tokens=5), DEFAULTS).max_tokens == 5


# ---------------------------------------------------------------- completions


def completion(**fields: Any) -> CompletionRequest:
    return decode(msgspec.json.encode({"model": "m", **fields}), CompletionRequest)


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("hello", "hello"),
        (["hello"], "hello"),
        ([1, 2, 3], [1, 2, 3]),
        ([[1, 2, 3]], [1, 2, 3]),
        ("", ""),
    ],
)
def test_single_prompt_shapes(prompt: Any, expected: Any) -> None:
    assert single_prompt(completion(prompt=prompt).prompt) == expected


@pytest.mark.parametrize("prompt", [["a", "b"], [], [[1], [2]], ["a", 1], [[]]])
def test_several_or_mixed_prompts_are_rejected(prompt: Any) -> None:
    with pytest.raises(BadRequest) as info:
        single_prompt(completion(prompt=prompt).prompt)
    assert info.value.param == "prompt"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": 5}, "prompt"),
        ({"model": "m", "prompt": [-1]}, "prompt[0]"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x"}, "model"),
    ],
)
def test_completion_errors_name_the_field(body: Any, param: str) -> None:
    with pytest.raises(BadRequest) as info:
        decode(msgspec.json.encode(body), CompletionRequest)
    assert info.value.param == param


def test_completion_accepts_unknown_fields() -> None:
    req = completion(prompt="x", best_of=1, logit_bias={}, suffix=None, logprobs=None, echo=True)
    assert req.echo is True
