"""The output parsers by name: every ``tool_call_parser`` and ``reasoning_parser`` a
model entry may give, and what each name stands for.

One table, read by the configuration (which checks an entry's names and falls back to
``auto`` for one it does not know) and by the engine (which parses with the format or
the markers a name stands for); ``tests/supervisor/engine/test_parsers.py`` checks
that the names lead to exactly the engine's formats and markers. Workers speak the
same vocabulary in ``ModelFacts.extra`` (``tool_parser``: mlx-lm's
``tool_parser_type``; ``reasoning_parser``). Data only.

Besides these, both settings take ``auto`` (what the worker found in the model) and
``none`` (parsing off).
"""

from __future__ import annotations

TOOL_PARSER_FORMATS: dict[str, str] = {
    # the formats the engine parses, each by its own name ("tokenizer": the worker's
    # tokenizer parses, see below)
    "hermes": "hermes",
    "qwen3_coder": "qwen3_coder",
    "llama3_json": "llama3_json",
    "mistral": "mistral",
    "function_gemma": "function_gemma",
    "gemma4": "gemma4",
    "pythonic": "pythonic",
    "tokenizer": "tokenizer",
    # mlx-lm's tool_parser_type names and the spellings of vLLM and mlx-openai-server
    "json_tools": "hermes",
    "qwen": "hermes",
    "qwen2_5": "hermes",
    "qwen3": "hermes",
    "qwen3_moe": "hermes",
    "qwen3_vl": "hermes",
    "qwen3_5": "qwen3_coder",
    "qwen3_next": "qwen3_coder",
    "qwen3_xml": "qwen3_coder",
    "llama3": "llama3_json",
    "llama": "llama3_json",
    "llama4_json": "llama3_json",
    "functiongemma": "function_gemma",
    "gemma3": "gemma3",
    "tool_code": "gemma3",
    "harmony": "harmony",
    "gpt_oss": "harmony",
    "openai": "harmony",
    "minimax_m2": "minimax_m2",
    "minimax": "minimax_m2",
    "glm4_moe": "glm45",
    "glm45": "glm45",
    "glm46": "glm45",
    "glm47": "glm47",
    "glm47_flash": "glm47",
    "kimi_k2": "kimi_k2",
    # families mlx-lm parses and this gateway does not: the worker does it
    "kimi_k3": "tokenizer",
    "longcat": "tokenizer",
    "longcat_flash_lite": "tokenizer",
    "minicpm5": "tokenizer",
    "muse_spark": "tokenizer",
    "laguna": "tokenizer",
    "nemotron3_nano": "tokenizer",
    "solar_open": "tokenizer",
}
"""Each ``tool_call_parser`` name → the name of the tool-call format that parses it."""

REASONING_PARSER_MARKERS: dict[str, str] = {
    # the marker sets of the engine, each by its own name
    "think": "think",
    "gemma4": "gemma4",
    "mistral": "mistral",
    "kimi": "kimi",
    "longcat": "longcat",
    "seed": "seed",
    "harmony": "harmony",
    # the spellings of vLLM and mlx-openai-server
    "gpt_oss": "harmony",
    "openai_gptoss": "harmony",
    "qwen3": "think",
    "qwen3_moe": "think",
    "qwen3_vl": "think",
    "qwen3_5": "think",
    "qwen3_next": "think",
    "deepseek_r1": "think",
    "deepseek-r1": "think",
    "deepseek_v3": "think",
    "glm4_moe": "think",
    "glm45": "think",
    "glm47_flash": "think",
    "minimax_m2": "think",
    "nemotron3_nano": "think",
    "solar_open": "think",
    "hunyuan_a13b": "think",
    "ernie45": "think",
    "olmo3": "think",
    "step3": "think",
    "kimi_k2": "think",
    "magistral": "mistral",
    "seed_oss": "seed",
}
"""Each ``reasoning_parser`` name → the name of the thinking markers it stands for."""

TOOL_PARSER_NAMES: tuple[str, ...] = ("auto", "none", *TOOL_PARSER_FORMATS)
"""Every value ``tool_call_parser`` accepts."""

REASONING_PARSER_NAMES: tuple[str, ...] = ("auto", "none", *REASONING_PARSER_MARKERS)
"""Every value ``reasoning_parser`` accepts."""
