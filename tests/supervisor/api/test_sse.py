"""SSE framing and the encoding of stream chunks."""

from __future__ import annotations

import msgspec

from mlx_gateway.protocol.messages import Usage as WireUsage
from mlx_gateway.supervisor.api.chat.stream import ChatEvents
from mlx_gateway.supervisor.api.completions.routes import CompletionEvents
from mlx_gateway.supervisor.engine.objects import usage_from
from mlx_gateway.supervisor.errors import WorkerCrashed
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.replies import error_event


def payload(event: bytes) -> dict:
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    body = event[len(b"data: ") : -2]
    assert b"\n" not in body
    return msgspec.json.decode(body)


def test_data_event() -> None:
    assert sse.data({"a": 1}) == b'data: {"a":1}\n\n'


def test_text_with_newlines_stays_on_one_data_line() -> None:
    event = sse.data({"text": "line one\nline two\r\n"})
    assert event.count(b"\n") == 2
    assert payload(event) == {"text": "line one\nline two\r\n"}


def test_done_and_comments() -> None:
    assert sse.DONE == b"data: [DONE]\n\n"
    assert sse.comment("keep-alive") == b": keep-alive\n\n"
    assert sse.comment() == b": \n\n"
    assert sse.comment("a\nb") == b": a\n: b\n\n"


def test_chat_chunks_without_usage_leave_usage_out() -> None:
    events = ChatEvents("chatcmpl-1", 123, "m", include_usage=False)
    opening = payload(events.opening())
    assert opening == {
        "id": "chatcmpl-1",
        "created": 123,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
                "logprobs": None,
            }
        ],
        "object": "chat.completion.chunk",
    }
    assert payload(events.content("hé"))["choices"][0]["delta"] == {"content": "hé"}
    finish = payload(events.finish("length"))
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] == "length"
    assert "usage" not in finish


def test_chat_chunks_with_usage_carry_null_then_the_usage() -> None:
    events = ChatEvents("chatcmpl-1", 123, "m", include_usage=True)
    assert payload(events.opening())["usage"] is None
    assert payload(events.content("x"))["usage"] is None
    assert payload(events.finish("stop"))["usage"] is None
    last = payload(events.usage(usage_from(WireUsage(4, 2, 1))))
    assert last["choices"] == []
    assert last["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 2,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 1},
    }


def test_completion_chunks() -> None:
    events = CompletionEvents("cmpl-1", 5, "m", include_usage=False)
    assert events.opening() is None
    chunk = payload(events.content("abc"))
    assert chunk["object"] == "text_completion"
    assert chunk["choices"] == [
        {"index": 0, "text": "abc", "finish_reason": None, "logprobs": None}
    ]
    assert payload(events.finish("stop"))["choices"][0]["finish_reason"] == "stop"
    echoing = CompletionEvents("cmpl-1", 5, "m", include_usage=True, echo="Say")
    assert payload(echoing.opening())["choices"][0]["text"] == "Say"


def test_error_event() -> None:
    assert payload(error_event(WorkerCrashed("worker crashed: SIGKILL"))) == {
        "error": {
            "message": "worker crashed: SIGKILL",
            "type": "server_error",
            "param": None,
            "code": "worker_crashed",
        }
    }
