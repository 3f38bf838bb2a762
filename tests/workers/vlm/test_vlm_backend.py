"""The vlm backend in-process (no sockets) on the tiny random Qwen2-VL: images in
every format, sizing options, batching, sampling, stops, cancels, the prefix
cache and the request checks."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from PIL import Image

from mlx_gateway.protocol.messages import (
    Batch,
    Constraint,
    Done,
    Error,
    Generate,
    Reply,
    SamplingParams,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.tool_prompt import TOOL_SECTION
from mlx_gateway.workers.runtime.contract import LoadError, RequestError
from mlx_gateway.workers.vlm.backend import VlmBackend
from tests.fixtures.tiny_vlm import PATCH, build_tiny_qwen2_vl

pytestmark = pytest.mark.slow

TOKEN_SIDE = PATCH * 2  # one image token per 28x28 pixels (patch 14, merge 2)


class Run:
    """A loaded backend and the replies it emitted."""

    def __init__(self, model: Path, **spec_fields: Any) -> None:
        self.replies: list[Reply] = []
        self.backend = VlmBackend()
        spec = WorkerSpec(
            worker_id="w",
            kind="vlm",
            model_path=str(model),
            served_model_name="tiny-vl",
            **{"max_concurrency": 4, **spec_fields},
        )
        self.backend.load(spec, self.replies.append)

    def submit(self, msg: Generate, files: list[bytes] = ()) -> None:  # type: ignore[assignment]
        try:
            self.backend.submit(msg, files)
        except RequestError as exc:
            self.replies.append(exc.to_error(msg.request_id))

    def drain(self, limit: int = 500) -> None:
        for _ in range(limit):
            if not self.backend.has_work():
                return
            self.backend.step()
        raise AssertionError("the backend did not finish")

    def events(self, request_id: str) -> list[Reply]:
        out: list[Reply] = []
        for reply in self.replies:
            if isinstance(reply, Batch):
                out += [c for c in reply.chunks if c.request_id == request_id]
            elif getattr(reply, "request_id", None) == request_id:
                out.append(reply)
        return out

    def text(self, request_id: str) -> str:
        return "".join(getattr(e, "text", "") for e in self.events(request_id))

    def started(self, request_id: str) -> Started:
        return next(e for e in self.events(request_id) if isinstance(e, Started))

    def done(self, request_id: str) -> Done:
        events = self.events(request_id)
        assert isinstance(events[-1], Done), events
        return events[-1]

    def error(self, request_id: str) -> Error:
        events = self.events(request_id)
        assert len(events) == 1 and isinstance(events[0], Error), events
        return events[0]


@pytest.fixture
def run(tiny_vlm_path: Path) -> Iterator[Run]:
    loaded = Run(tiny_vlm_path)
    yield loaded
    loaded.backend.close()


def picture(
    size: tuple[int, int] = (56, 56), color: tuple[int, int, int] = (255, 0, 0)
) -> Image.Image:
    image = Image.new("RGB", size, color)
    for x in range(0, size[0], 7):  # some structure for the vision tower to see
        image.putpixel((x, x % size[1]), (0, 0, 0))
    return image


def encode(image: Image.Image, fmt: str = "PNG", **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def ask(
    request_id: str,
    images: int = 1,
    text: str = "describe this image",
    detail: str = "auto",
    **sampling: Any,
) -> Generate:
    """One user message: ``images`` image parts, then the text."""
    parts: list[dict[str, Any]] = [{"type": "image", "detail": detail}] * images
    parts.append({"type": "text", "text": text})
    sampling = {"temperature": 0.0, "max_tokens": 12, **sampling}
    return Generate(
        request_id=request_id,
        messages=[{"role": "user", "content": parts}],
        images=list(range(images)),
        sampling=SamplingParams(**sampling),
    )


def image_tokens(width: int, height: int) -> int:
    """The prompt tokens of an image whose sides are multiples of 28 within the
    processor's pixel bounds."""
    return (width // TOKEN_SIDE) * (height // TOKEN_SIDE)


def test_an_image_request(run: Run) -> None:
    run.submit(ask("text", images=0))
    run.submit(ask("image"), [encode(picture((112, 56)))])
    run.drain()
    text_only = run.started("text").prompt_tokens
    # The chat template adds <|vision_start|> and <|vision_end|> around the pads.
    assert run.started("image").prompt_tokens == text_only + 2 + image_tokens(112, 56)
    done = run.done("image")
    assert done.finish_reason == "length"
    assert done.usage.prompt_tokens == run.started("image").prompt_tokens
    assert done.usage.completion_tokens == 12
    assert run.text("image").strip()


FORMATS = [
    ("PNG", {}),
    ("BMP", {}),
    ("TIFF", {}),
    ("GIF", {}),
    ("WEBP", {"lossless": True}),
]


def test_every_format_gives_the_same_answer(run: Run) -> None:
    # Few colours, so that GIF's palette holds them exactly.
    image = picture((84, 56))
    for fmt, options in FORMATS:
        run.submit(ask(fmt), [encode(image, fmt, **options)])
    run.submit(ask("JPEG"), [encode(image, "JPEG", quality=90)])
    run.drain()
    texts = {fmt: run.text(fmt) for fmt, _ in FORMATS}
    assert len(set(texts.values())) == 1, texts
    assert run.done("JPEG").finish_reason == "length"


def test_the_image_changes_the_answer(run: Run) -> None:
    run.submit(ask("red"), [encode(picture(color=(255, 0, 0)))])
    run.submit(ask("blue"), [encode(picture(color=(0, 0, 255)))])
    run.submit(ask("none", images=0))
    run.drain()
    assert len({run.text("red"), run.text("blue"), run.text("none")}) == 3


def test_a_batch_answers_as_each_request_alone(tiny_vlm_path: Path) -> None:
    requests = [
        (ask("small"), [encode(picture((56, 56)))]),
        (ask("wide", images=2), [encode(picture((168, 56))), encode(picture((56, 112)))]),
        (ask("text", images=0, text="count the shapes"), []),
        (ask("sampled", temperature=0.9, seed=7, max_tokens=10), [encode(picture((84, 84)))]),
        (ask("penalized", presence_penalty=1.5, max_tokens=10), [encode(picture((56, 84)))]),
    ]
    alone = {}
    for msg, files in requests:
        single = Run(tiny_vlm_path, max_concurrency=1)
        single.submit(msg, files)
        single.drain()
        alone[msg.request_id] = single.text(msg.request_id)
    together = Run(tiny_vlm_path, max_concurrency=8)
    for msg, files in requests:
        together.submit(msg, files)
    together.drain()
    assert {rid: together.text(rid) for rid in alone} == alone


def test_a_seed_reproduces_the_text(run: Run) -> None:
    files = [encode(picture())]
    for rid in ("a", "b"):
        run.submit(ask(rid, temperature=1.0, seed=3, max_tokens=16), files)
    run.submit(ask("c", temperature=1.0, seed=4, max_tokens=16), files)
    run.drain()
    assert run.text("a") == run.text("b")
    assert run.text("a") != run.text("c")


def test_sizing_options(tiny_vlm_path: Path) -> None:
    base = Run(tiny_vlm_path)
    base.submit(ask("text", images=0))
    text_only = base.started("text").prompt_tokens

    def tokens(run: Run, detail: str = "auto", size: tuple[int, int] = (224, 224)) -> int:
        msg = ask(f"{detail}{size}", detail=detail)
        run.submit(msg, [encode(picture(size))])
        return run.started(msg.request_id).prompt_tokens - text_only - 2

    assert tokens(base) == image_tokens(224, 224)
    capped = Run(tiny_vlm_path, options={"max_pixels": 112 * 112})
    assert tokens(capped) == image_tokens(112, 112)
    shaped = Run(tiny_vlm_path, options={"resize_shape": [56, 112]})
    assert tokens(shaped) == image_tokens(56, 112)
    # A wide image: the processor's own cap keeps more of it than "low" detail does.
    wide = Run(tiny_vlm_path)
    assert tokens(wide, "low", (2048, 256)) < tokens(wide, "high", (2048, 256))


def test_stop_strings_and_the_finish(run: Run) -> None:
    files = [encode(picture())]
    run.submit(ask("free", max_tokens=20), files)
    run.drain()
    full = run.text("free")
    stop = full[5:8]
    cut = full[: full.index(stop)]
    run.submit(ask("stopped", max_tokens=20, stop=[stop]), files)
    run.drain()
    assert run.text("stopped") == cut
    assert run.done("stopped").finish_reason == "stop"


def test_cancel_frees_the_slot(run: Run) -> None:
    files = [encode(picture())]
    run.submit(ask("long", max_tokens=200), files)
    run.backend.step()
    run.backend.step()
    run.backend.cancel("long")
    assert run.done("long").finish_reason == "cancelled"
    assert run.backend.counts() == (0, 0)
    run.submit(ask("next"), files)
    run.drain()
    assert run.done("next").finish_reason == "length"


def test_prefix_cache_serves_a_repeated_prompt(tiny_vlm_path: Path) -> None:
    system = "You describe pictures of red squares on white backgrounds. " * 12

    def conversation(request_id: str) -> Generate:
        msg = ask(request_id, images=0, text="what is in the picture?")
        assert msg.messages is not None
        msg.messages.insert(0, {"role": "system", "content": system})
        return msg

    cached = Run(tiny_vlm_path)
    for rid in ("first", "second"):
        cached.submit(conversation(rid))
        cached.drain()
    assert cached.done("first").usage.cached_tokens == 0
    second = cached.done("second").usage
    assert 0 < second.cached_tokens < second.prompt_tokens
    assert cached.text("second") == cached.text("first")

    uncached = Run(tiny_vlm_path, options={"prefix_cache": False})
    for rid in ("first", "second"):
        uncached.submit(conversation(rid))
        uncached.drain()
    assert uncached.done("second").usage.cached_tokens == 0
    assert uncached.text("second") == cached.text("first")


def test_raw_prompts(run: Run) -> None:
    run.submit(
        Generate(request_id="s", prompt="a red square", sampling=SamplingParams(max_tokens=4))
    )
    run.submit(Generate(request_id="ids", prompt=[5, 6, 7], sampling=SamplingParams(max_tokens=4)))
    run.submit(Generate(request_id="bad", prompt=[5, 10**6]))
    run.drain()
    assert run.done("s").usage.completion_tokens == 4
    assert run.done("ids").usage.prompt_tokens == 3
    assert run.error("bad").param == "prompt"


def test_request_checks(run: Run) -> None:
    good = encode(picture())
    run.submit(ask("garbage"), [b"GIF89a but not really"])
    run.submit(ask("missing", images=2), [good])
    run.submit(ask("too long", max_tokens=5000), [good])
    run.submit(ask("detail", detail="extreme"), [good])
    wrong = ask("part")
    assert wrong.messages is not None
    wrong.messages[0]["content"].append({"type": "input_audio"})
    run.submit(wrong, [good])
    run.drain()

    error = run.error("garbage")
    assert (error.status, error.param) == (400, "messages[0].content[0].image_url")
    assert "cannot be decoded" in error.message
    assert run.error("missing").status == 400
    overflow = run.error("too long")
    assert (overflow.code, overflow.param) == ("context_length_exceeded", "max_tokens")
    assert run.error("detail").param == "messages[0].content[0].image_url.detail"
    assert run.error("part").param == "messages[0].content[2].type"
    assert run.backend.counts() == (0, 0)


def test_fit_max_tokens_cuts_the_budget_to_the_context(tiny_vlm_path: Path) -> None:
    limit = 64
    loaded = Run(tiny_vlm_path, context_length=limit)
    try:
        loaded.submit(ask("fit", images=0, max_tokens=5000, fit_max_tokens=True))
        loaded.submit(ask("strict", images=0, max_tokens=5000))
        loaded.drain()
        done = loaded.done("fit")
        assert done.finish_reason == "length"
        assert done.usage.prompt_tokens + done.usage.completion_tokens == limit
        assert loaded.error("strict").code == "context_length_exceeded"
    finally:
        loaded.backend.close()


def test_unsupported_options_are_refused(run: Run) -> None:
    constrained = ask("constrained", images=0)
    constrained.constraint = Constraint(grammar='start: "x"')
    run.submit(constrained)
    with_logprobs = ask("logprobs", images=0)
    with_logprobs.logprobs = 2
    run.submit(with_logprobs)
    assert run.error("constrained").param == "response_format"
    assert run.error("logprobs").param == "logprobs"
    assert run.backend.counts() == (0, 0)


def test_kv_bits_reach_mlx_vlm_and_a_group_that_does_not_fit_is_refused(
    tiny_vlm_path: Path,
) -> None:
    # The tiny model's heads are 16 wide: no kv_group_size (32, 64, 128) divides them.
    with pytest.raises(LoadError, match="kv_group_size 32 does not divide"):
        Run(tiny_vlm_path, options={"kv_bits": 8, "kv_group_size": 32})


def test_a_late_system_message_is_kept_or_joins_the_system_prompt(run: Run) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "system", "content": "Be brief."},
    ]
    # The tiny Qwen2-VL template renders any role: the system turn stays in place.
    assert run.backend.prompts.apply_template(messages, 0, {}) == (
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # A template that refuses it with raise_exception: it leads instead.
    run.backend.processor.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' and not loop.first %}"
        "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
        "<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
        "{% else %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endif %}"
        "<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    )
    assert run.backend.prompts.apply_template(messages, 0, {}).startswith(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
    )


def test_tools_reach_a_template_that_ignores_them(run: Run) -> None:
    # The tiny model's template renders role and content only: the worker writes
    # the tools into a system message itself (see workers/tool_prompt.py).
    assert run.backend.tool_prompt.fallback
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    plain = ask("plain", images=0, text="weather?")
    run.submit(plain)
    run.submit(
        msgspec.structs.replace(plain, request_id="tools", chat_template_kwargs={"tools": [tool]})
    )
    run.drain()
    assert run.started("tools").prompt_tokens > run.started("plain").prompt_tokens + 50
    text = run.backend.prompts.apply_template(plain.messages or [], 0, {"tools": [tool]})
    section = TOOL_SECTION.format(tools=json.dumps(tool))
    assert text.startswith(f"<|im_start|>system\n{section}<|im_end|>\n<|im_start|>user\nweather?")


@pytest.fixture(scope="module")
def wide_head_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen2-VL with 2 heads of 32: a KV group of 32 fits its heads."""
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("vl32") / "vl", heads=2)


def test_kv_bits_quantize_mlx_vlm_batch_cache(wide_head_vlm: Path) -> None:
    image = encode(Image.new("RGB", (56, 56), (200, 30, 30)))
    texts, caches = [], []
    for options in ({}, {"kv_bits": 8, "kv_group_size": 32}):
        run = Run(wide_head_vlm, options=options)
        run.submit(ask("a", text="describe this image " * 20, max_tokens=16), [image])
        for _ in range(4):
            run.backend.step()
        batch = run.backend._generator._generation_batch  # mlx-vlm's running batch
        caches.append(type(batch.prompt_cache[0]).__name__)
        run.drain()
        texts.append(run.text("a"))
        assert run.done("a").usage.completion_tokens == 16
    assert caches == ["BatchKVCache", "BatchQuantizedKVCache"]
    assert texts[1] == texts[0]  # seen equal; 8-bit keys and values barely move greedy
