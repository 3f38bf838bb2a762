"""The settings language and vision models share: their context, sampling defaults,
chat template, output parsers, prefill batching and KV cache quantization.

Not a kind: ``config/kinds/lm.py`` and ``config/kinds/vlm.py`` extend it.
No I/O and no MLX here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from mlx_gateway.protocol.parsers import REASONING_PARSER_NAMES, TOOL_PARSER_NAMES
from mlx_gateway.supervisor.config.entry import ModelConfig, Positive, PositiveMiB

if TYPE_CHECKING:
    from mlx_gateway.supervisor.config.context import _Ctx
    from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

log = logging.getLogger("mlx_gateway.supervisor.config")


class TextModelConfig(ModelConfig, kw_only=True):
    """A model that generates text from a chat or a prompt."""

    context_length: Positive | Literal["auto"] | None = None
    """Tokens of prompt + completion; ``auto``: the largest multiple of 1024 (at most
    the model's own) whose KV cache fits the memory budget beside the model, decided
    when its worker starts."""
    max_tokens: Positive | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0)] | None = None
    chat_template_file: str | None = None
    trust_remote_code: bool = False
    prefill_batch_size: Positive = 8
    prefill_step_size: Positive = 2048
    kv_bits: Literal[4, 8] | None = None
    """Quantize the KV cache to this many bits (8 halves it, 4 quarters it) once a
    sequence holds ``quantized_kv_start`` tokens."""
    kv_group_size: Literal[32, 64, 128] = 64
    """Elements sharing one scale and bias in the quantized KV cache."""
    quantized_kv_start: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Tokens a sequence holds before its KV cache is quantized (0: from the start)."""
    stream_interval: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.02
    """Shortest time in seconds between two SSE writes of one stream; text generated
    meanwhile goes out with the next write (0: every step)."""
    tool_call_parser: str = "auto"
    """The format of the model's tool calls (``hermes``, ``qwen3_coder``,
    ``llama3_json``, ``mistral``, ``function_gemma``, ``gemma4``, ``pythonic``, or an
    alias); ``auto``: the one its chat template shows; ``none``: never parse tool
    calls."""
    reasoning_parser: str = "auto"
    """The markers of the model's thinking blocks (``think``, ``gemma4``,
    ``mistral``, ``kimi``, ``longcat``, ``seed``, or an alias such as ``qwen3``,
    ``deepseek_r1``); ``auto``: those in its vocabulary; ``none``: keep thinking in
    the answer text."""
    context_overflow: Literal["error", "truncate", "summarize"] = "error"
    """What a chat prompt too long for the context becomes: a 400
    ``context_length_exceeded`` (``error``); the conversation without its oldest
    non-system turns (``truncate``); or its older messages summarized by the model
    itself, keeping the system messages and the last 6 (``summarize``)."""
    server_tools: list[Annotated[str, msgspec.Meta(min_length=1)]] = []
    """Labels of ``tools.mcp_servers`` whose tools every request to this model gets,
    run by the gateway (for clients that cannot name MCP servers themselves: chat
    completions, Ollama's API, Home Assistant, Open WebUI)."""
    max_tokens_overflow: Literal["clamp", "error"] = "clamp"
    """A prompt that fits the context but not with the request's ``max_tokens``
    (``max_completion_tokens``, ``max_output_tokens``, ``num_predict``) runs with
    the budget cut to what the context has left (``clamp``), or is the 400
    ``context_length_exceeded`` (``error``, OpenAI's way)."""
    max_document_mb: PositiveMiB = 32.0
    """Largest document file of a request (a PDF or text file: a ``data:`` URL's or
    base64 bytes, a fetched file), in MiB → else 400 ``document_too_large``."""
    max_document_pages: Positive = 100
    """Most pages of one PDF → else 400 ``document_too_long``."""

    def check(self, ctx: _Ctx, here: _KeyPath) -> None:
        from mlx_gateway.supervisor.config.paths import existing_file

        super().check(ctx, here)
        if self.chat_template_file is not None:
            self.chat_template_file = existing_file(
                ctx, (*here, "chat_template_file"), self.chat_template_file, "chat template file"
            )
        self._check_parsers(ctx, here)

    def _check_parsers(self, ctx: _Ctx, here: _KeyPath) -> None:
        """An output parser this gateway does not know falls back to ``auto`` with a
        warning (mlx-openai-server configs name parsers of families not covered here)."""
        from mlx_gateway.supervisor.config.context import _display

        for key, choices in (
            ("tool_call_parser", TOOL_PARSER_NAMES),
            ("reasoning_parser", REASONING_PARSER_NAMES),
        ):
            value = getattr(self, key)
            if value in choices:
                continue
            pos = ctx.positions.get((*here, key))
            line = f" (line {pos.key_line})" if pos else ""
            log.warning(
                "%s%s%s: %s %r is not one this gateway knows (%s); detecting it from the model",
                f"{ctx.file}: " if ctx.file else "",
                _display(here),
                line,
                key,
                value,
                ", ".join(choices),
            )
            setattr(self, key, "auto")

    def kv_options(self) -> dict[str, object]:
        """The KV cache quantization (``workers/common/kv.py``); unset: nothing."""
        if self.kv_bits is None:
            return {}
        return {
            "kv_bits": self.kv_bits,
            "kv_group_size": self.kv_group_size,
            "quantized_kv_start": self.quantized_kv_start,
        }
