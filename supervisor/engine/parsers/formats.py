"""The tool-call formats by name, and how a model's format is chosen."""

from __future__ import annotations

from collections.abc import Sequence

from mlx_gateway.protocol.parsers import TOOL_PARSER_FORMATS
from mlx_gateway.supervisor.engine.parsers.gemma_formats import FunctionGemma, Gemma4
from mlx_gateway.supervisor.engine.parsers.glm_format import Glm45, Glm47
from mlx_gateway.supervisor.engine.parsers.harmony import Harmony
from mlx_gateway.supervisor.engine.parsers.json_formats import Hermes, Llama3Json, MistralJson
from mlx_gateway.supervisor.engine.parsers.kimi_format import KimiK2
from mlx_gateway.supervisor.engine.parsers.minimax_format import MiniMaxM2
from mlx_gateway.supervisor.engine.parsers.pythonic_format import Pythonic, ToolCode
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, ToolFormat
from mlx_gateway.supervisor.engine.parsers.xml_format import Qwen3Coder


class WorkerParsed:
    """The tokenizer's own parser, run by the worker: mlx-lm parses the formats this
    gateway does not (LongCat, Kimi-K3, MiniCPM 5, …) with the markers and parser it
    inferred from the chat template; calls arrive as ``Chunk.tool_calls``."""

    name = "tokenizer"
    start = ""
    end = ""
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        return []

    def grammar(self, tools: Sequence[Function], parallel: bool) -> None:
        return None  # forced calls in these formats run unconstrained


TOOL_FORMATS: dict[str, ToolFormat] = {
    fmt.name: fmt
    for fmt in (
        Hermes(),
        Qwen3Coder(),
        Llama3Json(),
        MistralJson(),
        FunctionGemma(),
        Gemma4(),
        Pythonic(),
        ToolCode(),
        Glm45(),
        Glm47(),
        MiniMaxM2(),
        KimiK2(),
        Harmony(),
        WorkerParsed(),
    )
}
"""Every format by its own name; :data:`...protocol.parsers.TOOL_PARSER_FORMATS` maps
each ``tool_call_parser`` name (aliases included) to one of these."""

DEFAULT_FORMAT = "hermes"
"""Used when neither the configuration nor the model names a format."""


FALLBACK_PROMPT = "fallback"
"""A worker's ``ModelFacts.extra["tool_prompt"]`` when the model's chat template
ignores tools and the worker describes them in the system prompt itself, asking
for Hermes calls (see ``workers/tool_prompt.py``)."""


def resolve_tool_format(name: str | None, extra: dict[str, str] | None) -> ToolFormat | None:
    """The format for a model: ``name`` is its ``tool_call_parser`` (``None`` or
    ``auto``: the format its worker reported in ``extra``, the worker's
    ``ModelFacts.extra`` — one this gateway does not parse is left to the worker's
    tokenizer — else Hermes); ``none`` turns tool-call parsing off. A model whose
    worker writes the fallback tool prompt is asked for Hermes calls, so that is
    its format whatever ``name`` says."""
    if name == "none":
        return None
    if (extra or {}).get("tool_prompt") == FALLBACK_PROMPT:
        return TOOL_FORMATS[DEFAULT_FORMAT]
    if name not in (None, "auto"):
        return TOOL_FORMATS[TOOL_PARSER_FORMATS.get(name, name)]
    reported = (extra or {}).get("tool_parser")
    if reported:
        key = TOOL_PARSER_FORMATS.get(reported, reported)
        # A format mlx-lm named but this gateway does not parse: the worker's
        # tokenizer has the parser for it.
        return TOOL_FORMATS.get(key, TOOL_FORMATS["tokenizer"])
    return TOOL_FORMATS[DEFAULT_FORMAT]
