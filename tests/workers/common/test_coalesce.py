"""The worker's chunk coalescing, on a clock the test moves."""

from __future__ import annotations

import pytest

from mlx_gateway.protocol.messages import Batch, Chunk, Reply, TokenLogprob
from mlx_gateway.workers.common.coalesce import Coalescer, interval_option
from mlx_gateway.workers.runtime.contract import LoadError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(interval: float) -> tuple[Coalescer, list[Reply], Clock]:
    sent: list[Reply] = []
    clock = Clock()
    return Coalescer(sent.append, interval, clock), sent, clock


def texts(batch: Reply) -> dict[str, str]:
    assert isinstance(batch, Batch)
    return {c.request_id: c.text for c in batch.chunks}


def test_first_text_goes_out_at_once_then_at_most_every_interval() -> None:
    out, sent, clock = make(0.02)
    out.add([Chunk("a", "Hel", 1)])
    assert [texts(b) for b in sent] == [{"a": "Hel"}]  # time to first token untouched
    for piece in ("lo", ",", " wor"):
        clock.now += 0.005
        out.add([Chunk("a", piece, 1)])
    assert len(sent) == 1  # held: 15 ms since the last message
    clock.now += 0.006
    out.add([Chunk("a", "ld", 1)])
    assert texts(sent[-1]) == {"a": "lo, world"}
    chunk = sent[-1].chunks[0]  # type: ignore[attr-defined]
    assert chunk.tokens == 4


def test_a_new_request_is_not_held_behind_the_others() -> None:
    out, sent, clock = make(0.02)
    out.add([Chunk("a", "x", 1)])
    clock.now += 0.001
    out.add([Chunk("a", "y", 1)])
    out.add([Chunk("a", "z", 1), Chunk("b", "first", 1)])
    assert texts(sent[-1]) == {"a": "yz", "b": "first"}


def test_end_sends_everything_held() -> None:
    out, sent, _clock = make(10.0)
    out.add([Chunk("a", "one", 1)])
    out.add([Chunk("a", " two", 1), Chunk("b", "B", 1)])
    assert texts(sent[-1]) == {"a": " two", "b": "B"}  # b's first text: at once
    out.add([Chunk("a", " three", 1), Chunk("b", "B", 1)])
    out.add([Chunk("a", " four", 1)])
    assert len(sent) == 2
    out.end("a")
    assert texts(sent[-1]) == {"a": " three four", "b": "B"}
    out.end("b")
    assert len(sent) == 3  # nothing left to send
    out.add([Chunk("a", "reused id", 1)])
    assert texts(sent[-1]) == {"a": "reused id"}  # a new request with that id: first text


def test_appended_text_merges_with_chunks_and_is_sent_when_the_step_ends() -> None:
    out, sent, clock = make(0.02)
    out.append("a", "Hel", 1)
    assert sent == []  # nothing goes out before the step's end
    out.send_if_due()
    assert [texts(b) for b in sent] == [{"a": "Hel"}]  # a's first text: at once
    clock.now += 0.005
    out.append("a", "lo", 2)  # two tokens: the first one made no text
    out.add([Chunk("a", ",", 1), Chunk("b", "B", 1)])  # b's first: sends both
    assert texts(sent[-1]) == {"a": "lo,", "b": "B"}
    assert sent[-1].chunks[0].tokens == 3  # type: ignore[attr-defined]
    clock.now += 0.005
    out.append("a", " world", 1)
    out.send_if_due()
    assert len(sent) == 2  # held: 5 ms since the last message
    clock.now += 0.02
    out.append("b", "!", 1)
    out.send_if_due()
    assert texts(sent[-1]) == {"a": " world", "b": "!"}


def test_logprobs_and_tool_calls_are_kept_in_order() -> None:
    out, sent, _clock = make(10.0)
    out.add([Chunk("a", "", 0)])  # nothing to say yet: still the first chunk
    lp = [TokenLogprob(text=t, logprob=-1.0) for t in ("p", "q", "r")]
    out.add([Chunk("a", "p", 1, logprobs=[lp[0]])])
    out.add([Chunk("a", "qr", 2, logprobs=lp[1:], tool_calls=[("f", "{}")])])
    out.add([Chunk("a", "", 0, tool_calls=[("g", "[]")])])
    out.flush()
    merged = sent[-1].chunks[0]  # type: ignore[attr-defined]
    assert merged.text == "pqr" and merged.tokens == 3
    assert [x.text for x in merged.logprobs] == ["p", "q", "r"]
    assert merged.tool_calls == [("f", "{}"), ("g", "[]")]


def test_interval_zero_sends_every_step() -> None:
    out, sent, _clock = make(0.0)
    for piece in "abc":
        out.add([Chunk("a", piece, 1)])
    assert [texts(b) for b in sent] == [{"a": "a"}, {"a": "b"}, {"a": "c"}]


@pytest.mark.parametrize("bad", [-1, "fast", True])
def test_a_bad_interval_option_is_a_load_error(bad: object) -> None:
    with pytest.raises(LoadError, match="stream_interval"):
        interval_option({"stream_interval": bad})
    assert interval_option({}) == 0.02
    assert interval_option({"stream_interval": 0}) == 0.0
