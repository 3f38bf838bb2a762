"""System messages after the first one, on the lm backend with real tokenizers and
chat templates: kept as system turns where the template renders them, added to the
first system message where it refuses them (raises) or drops them (silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.protocol.messages import Generate, Reply, SamplingParams, Started
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.lm.backend import LmBackend
from mlx_gateway.workers.lm.prompt import chat_tokens
from mlx_gateway.workers.runtime.contract import RequestError
from tests.fixtures.tiny_models import SYSTEM_FIRST_TEMPLATE

pytestmark = pytest.mark.slow

# Renders a leading system message and then only user and assistant turns: a later
# system message would be lost without a word.
DROPPING_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] != 'system' or loop.first %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def backend_with(
    template: str | None, tiny_lm_path: Path, tmp_path: Path, replies: list[Reply] | None = None
) -> LmBackend:
    options: dict[str, Any] = {}
    if template is not None:
        path = tmp_path / "template.jinja"
        path.write_text(template)
        options["chat_template_file"] = str(path)
    spec = WorkerSpec(
        worker_id="w", kind="lm", model_path=str(tiny_lm_path), served_model_name="t", **options
    )
    backend = LmBackend()
    backend.load(spec, (replies if replies is not None else []).append)
    return backend


def rendered(backend: LmBackend, messages: list[dict[str, Any]]) -> str:
    assert backend.tokenizer is not None
    tokens = chat_tokens(backend.tokenizer, messages, {}, backend.tool_prompt)
    return str(backend.tokenizer.decode(tokens))


def turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


CONVERSATION = [
    {"role": "system", "content": "You help."},
    {"role": "user", "content": "hello"},
    {"role": "system", "content": "Be brief."},
]


def test_a_template_that_renders_any_role_keeps_the_system_turn(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    backend = backend_with(None, tiny_lm_path, tmp_path)
    text = rendered(backend, CONVERSATION)
    assert text == (
        turn("system", "You help.")
        + turn("user", "hello")
        + turn("system", "Be brief.")
        + "<|im_start|>assistant\n"
    )
    backend.close()


@pytest.mark.parametrize("template", [SYSTEM_FIRST_TEMPLATE, DROPPING_TEMPLATE])
def test_refused_or_dropped_system_turns_join_the_system_prompt(
    template: str, tiny_lm_path: Path, tmp_path: Path
) -> None:
    backend = backend_with(template, tiny_lm_path, tmp_path)
    merged = turn("system", "You help.\n\nBe brief.") + turn("user", "hello")
    assert rendered(backend, CONVERSATION) == merged + "<|im_start|>assistant\n"
    # Without a leading system message, one is made.
    text = rendered(backend, CONVERSATION[1:])
    assert text == turn("system", "Be brief.") + turn("user", "hello") + "<|im_start|>assistant\n"
    backend.close()


def test_the_merged_prompt_reaches_a_generation(tiny_lm_path: Path, tmp_path: Path) -> None:
    replies: list[Reply] = []
    backend = backend_with(SYSTEM_FIRST_TEMPLATE, tiny_lm_path, tmp_path, replies)
    request = Generate(request_id="r", messages=CONVERSATION, sampling=SamplingParams(max_tokens=1))
    first = rendered(backend, CONVERSATION)
    assert backend.tokenizer is not None
    expected = len(backend.tokenizer.encode(first, add_special_tokens=False))
    backend.submit(request, [])
    (started,) = [r for r in replies if isinstance(r, Started)]
    assert started.prompt_tokens == expected
    backend.close()


def test_other_template_errors_still_reach_the_client(tiny_lm_path: Path, tmp_path: Path) -> None:
    template = "{{ raise_exception('Only user turns, please.') }}"
    backend = backend_with(template, tiny_lm_path, tmp_path)
    with pytest.raises(RequestError, match="Only user turns, please") as err:
        rendered(backend, CONVERSATION)
    assert err.value.param == "messages"
    backend.close()
