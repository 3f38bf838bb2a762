"""The single-model launch flags of the peers' servers, as one table.

``mlx-gateway launch --model-path X`` accepts every flag of mlx-openai-server's
``launch`` and those of mlx_lm.server / mlx-vlm's server that mean the same thing.
Each row names the YAML key the flag sets (the key an mlx-openai-server file would
use, so the same renames and warnings apply as for a file; see ``keys.py``), and
the table is also what docs/configuration.md shows (``markdown_table``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


def _str_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _float_list(text: str) -> list[float]:
    try:
        return [float(part) for part in _str_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None


@dataclass(frozen=True)
class Flag:
    """One command-line flag and the config key it sets."""

    names: tuple[str, ...]
    """The flag and its spellings in the other servers (``--model`` of mlx_lm)."""
    key: str
    """The YAML key it sets (in ``section``)."""
    section: Literal["server", "model"]
    kind: type | Callable[[str], Any] | None
    """The argparse ``type``; ``None``: a switch (``store_true``)."""
    help: str
    origin: str = "mlx-openai-server"
    value: Any = None
    """For a switch: the value the key gets (``True`` unless said)."""


def _context_length(value: str) -> int | str:
    """``--context-length``: tokens, or ``auto``."""
    return value if value == "auto" else int(value)


_context_length.__name__ = "context_length"  # argparse: "invalid context_length value"

LAUNCH_FLAGS: tuple[Flag, ...] = (
    Flag(("--model-type",), "model_type", "model", str, "lm, vlm (multimodal), embeddings, …"),
    Flag(("--served-model-name",), "served_model_name", "model", str, "the name clients use"),
    Flag(
        ("--context-length",),
        "context_length",
        "model",
        _context_length,
        "context window in tokens, or auto (what the memory budget leaves)",
    ),
    Flag(("--max-tokens",), "default_max_tokens", "model", int, "default max_tokens"),
    Flag(("--temperature", "--temp"), "default_temperature", "model", float, "default temperature"),
    Flag(("--top-p",), "default_top_p", "model", float, "default top_p"),
    Flag(("--top-k",), "default_top_k", "model", int, "default top_k"),
    Flag(("--min-p",), "default_min_p", "model", float, "default min_p"),
    Flag(
        ("--repetition-penalty",),
        "default_repetition_penalty",
        "model",
        float,
        "default repetition penalty",
    ),
    Flag(("--max-concurrency",), "max_concurrency", "model", int, "requests decoded at once"),
    Flag(
        ("--decode-concurrency",),
        "batch_completion_size",
        "model",
        int,
        "requests decoded at once",
        origin="mlx_lm.server",
    ),
    Flag(
        ("--prompt-concurrency",),
        "batch_prefill_size",
        "model",
        int,
        "prompts prefilled together",
        origin="mlx_lm.server",
    ),
    Flag(("--prefill-step-size",), "batch_prefill_step_size", "model", int, "prefill chunk"),
    Flag(("--queue-timeout",), "queue_timeout", "model", float, "seconds a request may wait"),
    Flag(("--queue-size",), "queue_size", "model", int, "requests that may wait"),
    Flag(("--prompt-cache-size",), "prompt_cache_size", "model", int, "prompt cache entries kept"),
    Flag(
        ("--max-bytes", "--prompt-cache-bytes"),
        "prompt_cache_max_bytes",
        "model",
        str,
        "prompt cache size (bytes or 4GB)",
    ),
    Flag(("--kv-bits",), "kv_bits", "model", int, "quantize the KV cache (4 or 8)"),
    Flag(("--kv-group-size",), "kv_group_size", "model", int, "KV quantization group size"),
    Flag(
        ("--quantized-kv-start",),
        "quantized_kv_start",
        "model",
        int,
        "tokens before the KV cache is quantized",
    ),
    Flag(
        ("--max-kv-size",),
        "max_kv_size",
        "model",
        int,
        "rotating KV cache of this many tokens",
        origin="mlx-vlm, mlx_lm.generate",
    ),
    Flag(("--tool-call-parser",), "tool_call_parser", "model", str, "tool-call format"),
    Flag(("--reasoning-parser",), "reasoning_parser", "model", str, "reasoning format"),
    Flag(
        ("--enable-auto-tool-choice",),
        "enable_auto_tool_choice",
        "model",
        None,
        "accepted (tool calls are always parsed)",
    ),
    Flag(("--chat-template-file",), "chat_template_file", "model", str, "a Jinja chat template"),
    Flag(("--trust-remote-code",), "trust_remote_code", "model", None, "run the repo's code"),
    Flag(("--jit",), "jit_enabled", "model", None, "load on the first request (the default)"),
    Flag(("--auto-unload-minutes",), "auto_unload_minutes", "model", int, "idle minutes"),
    Flag(("--disable-batching",), "disable_batching", "model", None, "one request at a time"),
    Flag(
        ("--disable-auto-resize",),
        "disable_auto_resize",
        "model",
        None,
        "accepted, not used",
    ),
    Flag(("--config-name",), "config_name", "model", str, "image models: mflux preset"),
    Flag(("--quantize",), "quantize", "model", int, "image models: quantize bits"),
    Flag(("--lora-paths",), "lora_paths", "model", _str_list, "image models: LoRA files (a,b)"),
    Flag(("--lora-scales",), "lora_scales", "model", _float_list, "image models: LoRA scales"),
    Flag(
        ("--draft-model-path", "--draft-model"),
        "draft_model_path",
        "model",
        str,
        "language models: draft model for speculative decoding",
    ),
    Flag(
        ("--num-draft-tokens",),
        "num_draft_tokens",
        "model",
        int,
        "language models: tokens the draft proposes a round",
    ),
    Flag(
        ("--adapter-path",),
        "adapter_path",
        "model",
        str,
        "language models: LoRA adapter applied by default",
        origin="mlx_lm.server",
    ),
    Flag(("--model-load-timeout",), "model_load_timeout", "server", float, "start timeout (s)"),
    Flag(("--log-file",), "log_file", "server", str, "also log to this file (rotated)"),
    Flag(("--no-log-file",), "no_log_file", "server", None, "no log file (the default)"),
    Flag(("--log-rotation",), "log_rotation", "server", str, "rotate the log file at this size"),
    Flag(("--log-retention",), "log_retention", "server", int, "rotated log files kept"),
)
"""Flags of the one-model launch, beyond ``--model-path``, ``--host``, ``--port``,
``--log-level`` and ``--log-format`` (declared in cli.py)."""


def add_launch_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Declare every flag of :data:`LAUNCH_FLAGS` on ``parser``."""
    for flag in LAUNCH_FLAGS:
        dest = f"flag_{flag.section}_{flag.key}"
        if flag.kind is None:
            parser.add_argument(
                *flag.names, dest=dest, action="store_const", const=True, help=flag.help
            )
        else:
            parser.add_argument(
                *flag.names, dest=dest, type=flag.kind, metavar=flag.key.upper(), help=flag.help
            )


def flag_values(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (server, model) YAML keys the flags given on the command line set."""
    server: dict[str, Any] = {}
    model: dict[str, Any] = {}
    for flag in LAUNCH_FLAGS:
        value = getattr(args, f"flag_{flag.section}_{flag.key}", None)
        if value is not None:
            (server if flag.section == "server" else model)[flag.key] = value
    return server, model


def markdown_table() -> str:
    """The rows docs/configuration.md shows (a test keeps the two equal)."""
    lines = ["| Flag | Sets | From |", "| --- | --- | --- |"]
    for flag in LAUNCH_FLAGS:
        names = ", ".join(f"`{name}`" for name in flag.names)
        lines.append(f"| {names} | `{flag.section}.{flag.key}` | {flag.origin} |")
    return "\n".join(lines)
