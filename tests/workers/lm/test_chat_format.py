"""What the lm worker learns from a model's chat format: the tool-call format it
reports in Ready, whether a prompt opened a thinking block, and tool calls read by
the tokenizer's own (mlx-lm) parser — on tiny llamas whose templates show a format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.protocol.messages import (
    Batch,
    Constraint,
    Done,
    Generate,
    Reply,
    SamplingParams,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.tool_prompt import TOOL_SECTION, ToolPrompt
from mlx_gateway.workers.lm.backend import LmBackend
from tests.fixtures.tiny_models import build_tiny_lm

pytestmark = pytest.mark.slow

# Renders tools and earlier calls the way Hermes/Qwen templates do; mlx-lm reads the
# "json_tools" format off it.
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for call in m.get('tool_calls') or [] %}{% set tool_call = call.function %}"
    '<tool_call>\n{"name": "{{ tool_call.name }}", "arguments": '
    "{{ tool_call.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n"
    "{{ m['content'] }}{% if m.get('tool_calls') %}<|python_tag|>"
    '{"name": "x", "parameters": {}}{% endif %}<|im_end|>{% endfor %}'
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n{% endif %}"
)

# gpt-oss's harmony layout, shortened: every message a header, a channel, its text.
HARMONY_TEMPLATE = (
    "<|start|>system<|message|>Reasoning: medium\n\n# Valid channels: analysis, commentary, "
    "final.<|end|>{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "<|start|>assistant<|channel|>final<|message|>{{ m['content'] }}<|end|>"
    "{% else %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


def tiny_with_template(out: Path, template: str) -> Path:
    build_tiny_lm(out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    return out


def load(path: Path) -> tuple[LmBackend, list[Reply], Any]:
    replies: list[Reply] = []
    spec = WorkerSpec(worker_id="w", kind="lm", model_path=str(path), served_model_name="t")
    backend = LmBackend()
    facts = backend.load(spec, replies.append)
    return backend, replies, facts


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> tuple[LmBackend, list[Reply], Any]:
    return load(tiny_with_template(tmp_path_factory.mktemp("hermes"), HERMES_TEMPLATE))


def run(backend: LmBackend) -> None:
    while backend.has_work():
        backend.step()


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def test_the_reported_tool_format(hermes: Any, tmp_path: Path, tiny_lm_path: Path) -> None:
    _, _, facts = hermes
    assert facts.extra["tool_parser"] == "json_tools"
    _, _, llama = load(tiny_with_template(tmp_path / "llama", LLAMA3_TEMPLATE))
    assert llama.extra["tool_parser"] == "llama3_json"
    _, _, gpt_oss = load(tiny_with_template(tmp_path / "harmony", HARMONY_TEMPLATE))
    assert gpt_oss.extra["tool_parser"] == gpt_oss.extra["reasoning_parser"] == "harmony"
    _, _, plain = load(tiny_lm_path)
    assert "tool_parser" not in plain.extra and "think_start" not in plain.extra


def test_calls_parsed_by_the_tokenizer(hermes: Any) -> None:
    backend, replies, _ = hermes
    # The grammar makes the random model write a call in the template's format.
    call = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    grammar = 'start: "Sure. " ' + json.dumps(call)
    request = Generate(
        request_id="t",
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 0}}}],
            },
            {"role": "tool", "content": "done"},
        ],
        sampling=SamplingParams(max_tokens=200),
        chat_template_kwargs={"tools": TOOLS},
        constraint=Constraint(grammar),
        parse_tools=True,
    )
    replies.clear()
    backend.submit(request, [])
    run(backend)
    chunks = [c for r in replies if isinstance(r, Batch) for c in r.chunks]
    assert "".join(c.text for c in chunks) == "Sure. "
    assert [tc for c in chunks for tc in c.tool_calls] == [("f", '{"a": 1}')]
    done = replies[-1]
    assert isinstance(done, Done) and done.finish_reason == "stop"
    started = next(r for r in replies if isinstance(r, Started))
    assert started.reasoning is False


def test_a_call_cut_by_max_tokens_is_dropped_by_the_tokenizer_parser(hermes: Any) -> None:
    backend, replies, _ = hermes
    call = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    # The call takes about 60 tokens here (the constrained random model writes it
    # nearly a character a token): cut inside its start marker, its JSON, its end marker.
    for max_tokens in (8, 30, 60):
        request = Generate(
            request_id=f"cut{max_tokens}",
            messages=[{"role": "user", "content": "go"}],
            sampling=SamplingParams(max_tokens=max_tokens),
            chat_template_kwargs={"tools": TOOLS},
            constraint=Constraint('start: "Sure. " ' + json.dumps(call)),
            parse_tools=True,
        )
        replies.clear()
        backend.submit(request, [])
        run(backend)
        chunks = [c for r in replies if isinstance(r, Batch) for c in r.chunks]
        assert "".join(c.text for c in chunks) == "Sure. "
        assert not [tc for c in chunks for tc in c.tool_calls]
        done = replies[-1]
        assert isinstance(done, Done) and done.finish_reason == "length"
        assert done.usage.completion_tokens == max_tokens


# ------------------------------------------------- templates that ignore tools


@pytest.fixture(scope="module")
def plain(tiny_lm_path: Path) -> tuple[LmBackend, list[Reply], Any]:
    """The tiny llama's own template renders role and content, nothing of tools."""
    return load(tiny_lm_path)


def rendered(backend: LmBackend, messages: list[dict[str, Any]], tools: Any = None) -> str:
    kwargs = {"tools": tools} if tools else {}
    request = Generate(request_id="r", messages=messages, chat_template_kwargs=kwargs)
    tokens, _ = backend._prompt_tokens(request)
    assert backend.tokenizer is not None
    return backend.tokenizer.decode(tokens)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


def test_tools_reach_a_template_that_ignores_them(plain: Any) -> None:
    backend, _, facts = plain
    assert facts.extra["tool_prompt"] == "fallback"
    ask = [{"role": "user", "content": "weather in Paris?"}]
    without, with_tools = rendered(backend, ask), rendered(backend, ask, [WEATHER])
    assert without == "<|im_start|>user\nweather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    section = TOOL_SECTION.format(tools=json.dumps(WEATHER))
    assert with_tools == f"<|im_start|>system\n{section}<|im_end|>\n" + without
    assert '{"name": "<function name>", "arguments": {' in section  # Hermes calls

    # The earlier call and its result are written out; a system prompt gets the section.
    history = rendered(backend, [{"role": "system", "content": "Be brief."}, *HISTORY], [WEATHER])
    assert history == (
        f"<|im_start|>system\nBe brief.\n\n{section}<|im_end|>\n"
        "<|im_start|>user\nweather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_template_that_renders_tools_is_unchanged(hermes: Any) -> None:
    backend, _, facts = hermes
    assert facts.extra["tool_prompt"] == "template"
    assert backend.tokenizer is not None
    expected = backend.tokenizer.apply_chat_template(
        HISTORY, tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    text = rendered(backend, HISTORY, [WEATHER])
    assert text == expected and "# Tools" not in text and '{"type": "function"' in text


# Fails on a system message and on tools, as some older templates do.
STRICT_TEMPLATE = (
    "{% if tools %}{{ raise_exception('tools are not supported') }}{% endif %}"
    "{% for m in messages %}{% if m['role'] not in ('user', 'assistant') %}"
    "{{ raise_exception('roles must be user or assistant') }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_without_system_role_gets_the_tools_in_the_first_user_turn(
    tmp_path: Path,
) -> None:
    backend, _, facts = load(tiny_with_template(tmp_path / "strict", STRICT_TEMPLATE))
    assert facts.extra["tool_prompt"] == "fallback"
    section = TOOL_SECTION.format(tools=json.dumps(WEATHER))
    text = rendered(backend, HISTORY, [WEATHER])
    assert text.startswith(f"<|im_start|>user\n{section}\n\nweather in Paris?<|im_end|>\n")
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>" in text


def test_the_fallback_section_is_documented_verbatim() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "api.md").read_text()
    block = docs.split("  ```text\n", 1)[1].split("\n  ```", 1)[0]
    unindented = "\n".join(line.removeprefix("  ") for line in block.split("\n"))
    assert unindented == TOOL_SECTION.format(tools="{tools}")


def test_the_section_joins_content_part_lists_as_a_part() -> None:
    parts = [{"type": "image"}, {"type": "text", "text": "what is this?"}]
    section = TOOL_SECTION.format(tools=json.dumps(WEATHER))
    no_system = ToolPrompt(fallback=True, system_role=False)
    (user,) = no_system.messages([{"role": "user", "content": parts}], [WEATHER])
    assert user["content"] == [{"type": "text", "text": f"{section}\n\n"}, *parts]
    system = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}]
    (first,) = ToolPrompt(fallback=True).messages(system, [WEATHER])
    assert first["content"][-1] == {"type": "text", "text": f"\n\n{section}"}
    assert ToolPrompt().messages(system, [WEATHER]) is system  # the template renders tools
