"""The lm backend in-process (no sockets): request checks, templates, finishing."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from mlx_gateway.protocol.messages import (
    Batch,
    Done,
    Generate,
    Ping,
    Reply,
    SamplingParams,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.lm.backend import LmBackend
from mlx_gateway.workers.runtime.contract import LoadError, RequestError

pytestmark = pytest.mark.slow


def make_backend(model: Path, **spec_fields: object) -> tuple[LmBackend, list[Reply]]:
    replies: list[Reply] = []
    spec = WorkerSpec(
        worker_id="w", kind="lm", model_path=str(model), served_model_name="tiny", **spec_fields
    )  # type: ignore[arg-type]
    backend = LmBackend()
    backend.load(spec, replies.append)
    return backend, replies


@pytest.fixture(scope="module")
def lm(tiny_lm_path: Path) -> tuple[LmBackend, list[Reply]]:
    return make_backend(tiny_lm_path, max_concurrency=2)


def chat(request_id: str, content: object, **sampling: object) -> Generate:
    return Generate(
        request_id=request_id,
        messages=[{"role": "user", "content": content}],
        sampling=SamplingParams(**sampling),  # type: ignore[arg-type]
    )


def run(backend: LmBackend) -> None:
    for _ in range(10_000):
        if not backend.has_work():
            return
        backend.step()
    raise AssertionError("the backend never went idle")


def started(replies: list[Reply], request_id: str) -> Started:
    return next(r for r in replies if isinstance(r, Started) and r.request_id == request_id)


def test_chat_template_renders_text_parts_like_a_string(lm) -> None:
    backend, replies = lm
    backend.submit(chat("s", "hello world", max_tokens=1), [])
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    backend.submit(chat("p", parts, max_tokens=1), [])
    run(backend)
    assert started(replies, "s").prompt_tokens == started(replies, "p").prompt_tokens


def test_non_text_parts_are_refused(lm) -> None:
    backend, _ = lm
    parts = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(RequestError) as err:
        backend.submit(chat("img", parts), [])
    assert err.value.param == "messages"
    assert "image_url" in err.value.message


def test_long_messages_overflow_the_context(lm) -> None:
    backend, _ = lm
    with pytest.raises(RequestError) as err:
        backend.submit(chat("long", "hello world " * 2000), [])
    assert (err.value.status, err.value.code, err.value.param) == (
        400,
        "context_length_exceeded",
        "messages",
    )
    assert "maximum context length is 2048 tokens" in err.value.message
    overflow = err.value.overflow
    assert overflow is not None and overflow.prompt_tokens > 2048
    assert (overflow.max_tokens, overflow.limit) == (None, 2048)


def test_max_tokens_beyond_the_context(lm) -> None:
    backend, _ = lm
    with pytest.raises(RequestError) as err:
        backend.submit(chat("big", "hello", max_tokens=2040), [])
    assert err.value.param == "max_tokens"
    assert err.value.code == "context_length_exceeded"
    assert "in the messages, 2040 in the completion" in err.value.message
    overflow = err.value.overflow
    assert overflow is not None and 8 < overflow.prompt_tokens < 2048
    assert (overflow.max_tokens, overflow.limit) == (2040, 2048)
    assert f"({overflow.prompt_tokens} in the messages" in err.value.message
    # The numbers cross the wire with the error.
    assert err.value.to_error("big").overflow == overflow


def test_raw_prompt_overflow_names_the_prompt(lm) -> None:
    backend, _ = lm
    with pytest.raises(RequestError) as err:
        backend.submit(Generate(request_id="raw", prompt=[5] * 2048), [])
    assert err.value.param == "prompt"


def test_prompt_token_ids_are_checked(lm) -> None:
    backend, _ = lm
    with pytest.raises(RequestError) as err:
        backend.submit(Generate(request_id="ids", prompt=[1, 99999]), [])
    assert err.value.param == "prompt"
    assert "99999" in err.value.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", -1.0), ("top_p", 0.0), ("top_k", -1), ("min_p", 2.0), ("max_tokens", 0)],
)
def test_bad_sampling_values_name_the_field(lm, field: str, value: object) -> None:
    backend, _ = lm
    with pytest.raises(RequestError) as err:
        backend.submit(chat("bad", "hi", **{field: value}), [])
    assert err.value.param == field


def test_other_requests_are_refused(lm) -> None:
    backend, _ = lm
    with pytest.raises(RequestError):
        backend.submit(Ping(), [])  # type: ignore[arg-type]


def test_eos_ends_with_stop_and_sends_no_eos_text(lm, tiny_lm_path: Path) -> None:
    # A random model reaches EOS only by chance, so feed the EOS token directly.
    backend, _ = lm
    eos = Tokenizer.from_file(str(tiny_lm_path / "tokenizer.json")).token_to_id("<|im_end|>")
    backend.submit(chat("eos", "hello", max_tokens=50), [])
    backend.step()
    active = backend.scheduler._by_id["eos"]
    chunk = backend.scheduler._advance(active, eos, "stop")
    assert chunk is None or "<|im_end|>" not in chunk.text
    assert active.finish == "stop"
    backend.cancel("eos")


def test_queued_requests_wait_for_a_slot(lm) -> None:
    backend, replies = lm
    start = len(replies)
    for i in range(3):
        backend.submit(chat(f"q{i}", "count", max_tokens=3, temperature=0.0), [])
    assert backend.counts() == (0, 3)
    backend.step()
    assert backend.counts() == (2, 1)  # max_concurrency=2
    run(backend)
    done = [r for r in replies[start:] if isinstance(r, Done)]
    assert sorted(d.request_id for d in done) == ["q0", "q1", "q2"]
    assert all(d.usage.completion_tokens == 3 and d.finish_reason == "length" for d in done)
    batches = [r for r in replies[start:] if isinstance(r, Batch)]
    assert max(len(b.chunks) for b in batches) == 2


def test_chat_template_file_overrides_the_tokenizer_template(tiny_lm_path: Path, tmp_path) -> None:
    template = tmp_path / "plain.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    backend, replies = make_backend(tiny_lm_path, chat_template_file=str(template))
    backend.submit(chat("t", "hello world", max_tokens=1), [])
    expected = Tokenizer.from_file(str(tiny_lm_path / "tokenizer.json")).encode("hello world")
    assert started(replies, "t").prompt_tokens == len(expected.ids)
    backend.close()


def test_missing_chat_template_file_is_a_load_error(tiny_lm_path: Path, tmp_path) -> None:
    with pytest.raises(LoadError, match=r"nope\.jinja"):
        make_backend(tiny_lm_path, chat_template_file=str(tmp_path / "nope.jinja"))


def test_chat_template_kwargs_reach_the_template(tiny_lm_path: Path, tmp_path) -> None:
    template = tmp_path / "kw.jinja"
    template.write_text("{{ preamble }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    backend, replies = make_backend(tiny_lm_path, chat_template_file=str(template))
    request = chat("kw", "hello", max_tokens=1)
    request.chat_template_kwargs = {"preamble": "The quick brown fox "}
    backend.submit(request, [])
    backend.submit(chat("plain", "hello", max_tokens=1), [])
    assert started(replies, "kw").prompt_tokens > started(replies, "plain").prompt_tokens
    backend.close()
