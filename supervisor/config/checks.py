"""What types cannot express: model kinds, local paths, parsers, image presets,
memory sizes, unique names."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from mlx_gateway.protocol.kinds import (
    BATCH_TOKENS,
    KINDS,
    SPEECH,
    TRANSCRIPTION,
    kind_serves,
    kinds_serving,
)
from mlx_gateway.supervisor.config.context import _Ctx, _display, _show, _suggest
from mlx_gateway.supervisor.config.image import preset_model_type
from mlx_gateway.supervisor.config.parser_names import REASONING_PARSER_NAMES, TOOL_PARSER_NAMES
from mlx_gateway.supervisor.config.schema import (
    IMAGE_SIZE_MULTIPLE,
    MODEL_TYPES,
    SERVABLE_KINDS,
    GatewayConfig,
    ModelConfig,
)
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

log = logging.getLogger("mlx_gateway.supervisor.config")

# --------------------------------------------------------------------------- checks


def _absolute(base: Path, value: str) -> str:
    return os.path.abspath(os.path.join(base, os.path.expanduser(value)))


def _looks_local(base: Path, path: str) -> bool:
    """A local directory rather than a Hugging Face ``org/name`` repo id."""
    return (
        path.startswith(("/", "./", "../", "~"))
        or path in (".", "..")
        or path.count("/") > 1
        or os.path.exists(os.path.join(base, os.path.expanduser(path)))
    )


def _check_sizes(ctx: _Ctx, config: GatewayConfig) -> None:
    from mlx_gateway.supervisor.config.sizes import budget_bytes, parse_size

    try:
        budget_bytes(config.server.memory_budget, total=1)
    except ValueError as exc:
        raise ctx.error(("server", "memory_budget"), str(exc)) from None
    try:
        if parse_size(config.server.log_rotation) <= 0:
            raise ValueError(f"expected a size > 0, got {config.server.log_rotation!r}")
    except ValueError as exc:
        raise ctx.error(("server", "log_rotation"), str(exc)) from None
    for i, model in enumerate(config.models):
        if model.memory_estimate is not None:
            try:
                parse_size(model.memory_estimate)
            except ValueError as exc:
                raise ctx.error(("models", i, "memory_estimate"), str(exc)) from None
        try:
            if parse_size(model.prompt_cache_bytes) < 0:
                raise ValueError(f"expected a size ≥ 0, got {model.prompt_cache_bytes!r}")
        except ValueError as exc:
            raise ctx.error(("models", i, "prompt_cache_bytes"), str(exc)) from None
        if model.prompt_cache_disk_bytes is not None:
            try:
                parse_size(model.prompt_cache_disk_bytes)
            except ValueError as exc:
                raise ctx.error(("models", i, "prompt_cache_disk_bytes"), str(exc)) from None
    try:
        parse_size(config.server.prompt_cache_disk_bytes)
    except ValueError as exc:
        raise ctx.error(("server", "prompt_cache_disk_bytes"), str(exc)) from None


def _check_peers(ctx: _Ctx, config: GatewayConfig) -> None:
    names: dict[str, int] = {}
    for j, peer in enumerate(config.server.peers):
        if peer.name in names:
            raise ctx.error(
                ("server", "peers", j, "name"),
                f"the peer name {peer.name!r} is already used by server.peers[{names[peer.name]}]; "
                "give each peer its own name",
            )
        names[peer.name] = j


def _check_wyoming(ctx: _Ctx, config: GatewayConfig) -> None:
    """The models ``server.wyoming`` offers are speech models of this file."""
    wyoming = config.server.wyoming
    if wyoming is None:
        return
    speech = {*kinds_serving(TRANSCRIPTION), *kinds_serving(SPEECH)}
    kinds = {name: model.worker_kind for model in config.models for name in model.names}
    for j, name in enumerate(wyoming.models):
        if kinds.get(name) not in speech:
            offered = ", ".join(n for n, k in kinds.items() if k in speech) or "none"
            what = "is not a model of this file" if name not in kinds else "is no speech model"
            raise ctx.error(
                ("server", "wyoming", "models", j),
                f"{name!r} {what}; Wyoming serves speech-to-text and text-to-speech models "
                f"(here: {offered})",
            )


def _check(ctx: _Ctx, config: GatewayConfig) -> None:
    _check_sizes(ctx, config)
    _check_peers(ctx, config)
    _check_wyoming(ctx, config)
    _check_groups(ctx, config)
    seen: dict[str, _KeyPath] = {}
    for i, model in enumerate(config.models):
        here: _KeyPath = ("models", i)
        clash = model.served_model_name in seen
        ctx.labels[i] = model.model_path if clash else model.served_model_name
        _check_kind(ctx, here, model)
        _check_paths(ctx, here, model)
        _check_image(ctx, here, model)
        _check_kv(ctx, here, model)
        _check_draft(ctx, here, model)
        _check_adapters(ctx, here, model)
        _check_parsers(ctx, here, model)
        _check_distributed(ctx, here, model)
        for path, name in _name_paths(ctx, here, model):
            if not name.strip() or any(c.isspace() for c in name):
                raise ctx.error(
                    path, f"{_show(name)} cannot be a model name: it is blank or has spaces"
                )
            if name in seen:
                other = seen[name]
                written, pos = ctx.locate(other)
                at = f" at {ctx.file}:{pos.value_line}" if ctx.file and pos else ""
                j = ctx.model_index(other)
                if j == i or j is None:
                    owner = "this same entry"
                else:
                    owner = f"models[{j}] ({ctx.labels.get(j, '?')!r})"
                raise ctx.error(
                    path,
                    f"the name {name!r} is already used by {owner} as its "
                    f"{_display(written[2:])}{at}; every served_model_name and alias must be "
                    "unique across the file",
                )
            seen[name] = path


def _check_distributed(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    spread = model.distributed
    if spread is None:
        return
    if model.worker_kind != "lm":
        raise ctx.error(
            (*here, "distributed"),
            f"distributed applies to language models (model_type lm) only, and this "
            f"entry's model_type is {model.model_type!r}; remove it",
        )
    if len(spread.hosts) * spread.ranks_per_host < 2:
        raise ctx.error(
            (*here, "distributed", "hosts"),
            "a distributed model needs at least 2 ranks: list 2 or more hosts, or set "
            "ranks_per_host to 2 or more",
        )
    if spread.hostfile is not None:
        resolved = _absolute(ctx.base_dir, spread.hostfile)
        if not os.path.isfile(resolved):
            raise ctx.error(
                (*here, "distributed", "hostfile"),
                f"host file {resolved!r} does not exist; make one with mlx.distributed_config "
                "(relative paths start from the config file's folder)",
            )
        spread.hostfile = resolved


def _check_groups(ctx: _Ctx, config: GatewayConfig) -> None:
    """Two ``on_demand: false`` models in one group cannot both be kept running:
    say so (the last one started evicts the other, which then loads on demand)."""
    kept: dict[str, list[str]] = {}
    for model in config.models:
        if model.group is not None and not model.on_demand:
            kept.setdefault(model.group, []).append(model.served_model_name)
    for group, names in kept.items():
        if len(names) > 1:
            log.warning(
                "%sgroup %r: %s are all on_demand: false, but one model of a group is "
                "resident at a time; only one of them stays loaded (set on_demand: true "
                "on the others, or put them in different groups)",
                f"{ctx.file}: " if ctx.file else "",
                group,
                ", ".join(repr(n) for n in names),
            )


def _name_paths(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> list[tuple[_KeyPath, str]]:
    served = (*here, "served_model_name")
    if served not in ctx.origin:  # defaulted to model_path
        served = (*here, "model_path")
    return [
        (served, model.served_model_name),
        *(((*here, "aliases", j), alias) for j, alias in enumerate(model.aliases)),
    ]


_EMBEDDINGS_ONLY: dict[str, Any] = {"truncate": False}
"""Per-model keys of embeddings models, with their defaults."""
_BATCH_TOKENS_ONLY: dict[str, Any] = {"max_batch_tokens": None}
"""Per-model keys of the kinds whose inputs share padded passes (embeddings, rerank)."""

_VISION_ONLY: dict[str, Any] = {
    "max_images": 8,
    "image_fetch_timeout": 10.0,
    "allow_private_image_urls": None,
    "resize_shape": None,
    "max_pixels": None,
    "prefix_cache": True,
}
"""Per-model keys of vision models (``vlm``), with their defaults."""

_TTS_ONLY: dict[str, Any] = {
    "max_input_chars": 4096,
    "voice": None,
    "voices": {},
    "generate_kwargs": {},
}
"""Per-model keys of text-to-speech models (``tts``), with their defaults."""


def _check_kind(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    kind = MODEL_TYPES.get(model.model_type)
    if kind is None:
        close = _suggest(model.model_type, list(MODEL_TYPES))
        raise ctx.error(
            (*here, "model_type"),
            f"unknown model_type {model.model_type!r}; allowed: {', '.join(MODEL_TYPES)}"
            + (f" (did you mean '{close}'?)" if close else ""),
        )
    if kind not in SERVABLE_KINDS:
        servable = ", ".join(t for t, k in MODEL_TYPES.items() if k in SERVABLE_KINDS)
        raise ctx.error(
            (*here, "model_type"),
            f"model_type {model.model_type!r} is not supported yet by this gateway "
            f"(supported now: {servable}); remove this entry or serve it elsewhere for now",
        )
    if not kind_serves(kind, BATCH_TOKENS):
        for key, default in _BATCH_TOKENS_ONLY.items():
            if getattr(model, key) != default:
                served = ", ".join(kinds_serving(BATCH_TOKENS))
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to models of model_type {served} only, and this "
                    f"entry's model_type is {model.model_type!r}; remove it",
                )
    if kind != "embeddings":
        for key, default in _EMBEDDINGS_ONLY.items():
            if getattr(model, key) != default:
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to embeddings models only, and this entry's "
                    f"model_type is {model.model_type!r}; remove it",
                )
    if kind != "vlm":
        for key, default in _VISION_ONLY.items():
            if getattr(model, key) != default:
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to vision models (model_type vlm) only, and this "
                    f"entry's model_type is {model.model_type!r}; remove it",
                )
    if kind != "tts":
        for key, default in _TTS_ONLY.items():
            if getattr(model, key) != default:
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to text-to-speech models (model_type tts) only, and "
                    f"this entry's model_type is {model.model_type!r}; remove it",
                )


def _check_paths(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    base = ctx.base_dir
    written = model.model_path.strip()
    if not written:
        raise ctx.error((*here, "model_path"), "model_path is empty")
    if _looks_local(base, written):
        resolved = _absolute(base, written)
        gguf = resolved.endswith(".gguf") and os.path.isfile(resolved)
        if not os.path.isdir(resolved) and not gguf:
            state = "is not a directory" if os.path.exists(resolved) else "does not exist"
            raise ctx.error(
                (*here, "model_path"),
                f"local model directory {resolved!r} {state}; fix the path (relative paths "
                "start from the config file's folder), give a .gguf file, a Hugging Face "
                "repo id 'org/name' or an Ollama name 'ollama:name:tag'",
            )
        model.model_path = resolved
    if model.chat_template_file is not None:
        resolved = _absolute(base, model.chat_template_file)
        if not os.path.isfile(resolved):
            raise ctx.error(
                (*here, "chat_template_file"),
                f"chat template file {resolved!r} does not exist; fix the path (relative "
                "paths start from the config file's folder)",
            )
        model.chat_template_file = resolved
    if model.python is not None:
        model.python = _resolve_python(ctx, (*here, "python"), model.python)


def _check_parsers(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """An output parser this gateway does not know falls back to ``auto`` with a
    warning (mlx-openai-server configs name parsers of families not covered here)."""
    for key, choices in (
        ("tool_call_parser", TOOL_PARSER_NAMES),
        ("reasoning_parser", REASONING_PARSER_NAMES),
    ):
        value = getattr(model, key)
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
        setattr(model, key, "auto")


def _check_kv(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """KV cache settings only where a backend applies them."""
    kind = model.worker_kind
    for key in ("kv_bits", "max_kv_size"):
        if getattr(model, key) is not None and not KINDS[kind].memory.kv:
            raise ctx.error(
                (*here, key),
                f"{key} applies to language and vision models, not to model_type "
                f"{model.model_type!r}; remove it",
            )
    if model.context_length == "auto" and not KINDS[kind].memory.kv:
        raise ctx.error(
            (*here, "context_length"),
            "context_length: auto sizes a KV cache, which only language and vision models "
            f"have, not model_type {model.model_type!r}; give a number or remove it",
        )
    if model.max_kv_size is not None and kind == "vlm":
        raise ctx.error(
            (*here, "max_kv_size"),
            "mlx-vlm's batch generator has no bounded KV cache; remove max_kv_size "
            "(kv_bits shrinks a vision model's cache instead)",
        )
    if model.max_kv_size is not None and model.kv_bits is not None:
        raise ctx.error(
            (*here, "kv_bits"),
            "kv_bits and max_kv_size together: mlx-lm quantizes only unbounded caches; "
            "keep one of them",
        )


def _check_draft(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """A draft model only for language models, on a plain KV cache, in one process;
    a local draft folder must exist."""
    draft = model.draft_model_path
    if draft is None:
        if (*here, "num_draft_tokens") in ctx.origin:
            log.warning(
                "%s: num_draft_tokens without draft_model_path does nothing", _display(here)
            )
        return
    path = (*here, "draft_model_path")
    if model.worker_kind != "lm":
        raise ctx.error(
            path,
            "draft_model_path (speculative decoding) applies to language models (model_type "
            f"lm), and this entry's model_type is {model.model_type!r}; remove it",
        )
    for key in ("kv_bits", "max_kv_size", "distributed"):
        if getattr(model, key) is not None:
            raise ctx.error(
                path,
                f"draft_model_path and {key} together: speculative decoding needs a plain "
                f"KV cache in one process; keep one of them",
            )
    written = draft.strip()
    if not written:
        raise ctx.error(path, "draft_model_path is empty")
    if _looks_local(ctx.base_dir, written):
        resolved = _absolute(ctx.base_dir, written)
        if not os.path.isdir(resolved):
            state = "is not a directory" if os.path.exists(resolved) else "does not exist"
            raise ctx.error(
                path,
                f"local draft model directory {resolved!r} {state}; fix the path (relative "
                "paths start from the config file's folder) or give a Hugging Face repo id "
                "'org/name'",
            )
        model.draft_model_path = resolved


def _check_adapters(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """LoRA adapters: language models only, valid ids, existing mlx-lm adapter folders
    (relative paths from the config file's folder)."""
    from mlx_gateway.supervisor.config.lm import (
        DEFAULT_ADAPTER,
        adapter_folder_problem,
        adapter_id_problem,
    )

    entries: list[tuple[_KeyPath, str | None, str]] = [
        ((*here, "adapters", adapter_id), adapter_id, path)
        for adapter_id, path in model.adapters.items()
    ]
    if model.adapter_path is not None:
        entries.append(((*here, "adapter_path"), None, model.adapter_path))
    if not entries:
        return
    if model.worker_kind != "lm":
        raise ctx.error(
            entries[0][0],
            "LoRA adapters are served for language models (model_type lm), and this "
            f"entry's model_type is {model.model_type!r}; remove them",
        )
    if model.distributed is not None:
        raise ctx.error(
            entries[0][0],
            "LoRA adapters and distributed together: a sharded model's layers take no "
            "adapter here; keep one of them",
        )
    if model.adapter_path is not None and DEFAULT_ADAPTER in model.adapters:
        raise ctx.error(
            (*here, "adapter_path"),
            f"adapter_path mounts its adapter as {DEFAULT_ADAPTER!r}, and adapters has an "
            f"entry {DEFAULT_ADAPTER!r} too; rename that entry or drop adapter_path",
        )
    resolved: dict[str, str] = {}
    for path, adapter_id, folder in entries:
        if adapter_id is not None and (why := adapter_id_problem(adapter_id)):
            raise ctx.error(path, f"{adapter_id!r} cannot be an adapter id: {why}")
        absolute = _absolute(ctx.base_dir, folder)
        if (why := adapter_folder_problem(absolute)) is not None:
            raise ctx.error(
                path, f"{why}; fix the path (relative paths start from the config file's folder)"
            )
        if adapter_id is None:
            model.adapter_path = absolute
        else:
            resolved[adapter_id] = absolute
    model.adapters = resolved


def _check_image(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """The image settings: a preset name that fits the model_type, one scale per LoRA,
    local LoRA files, a valid ``size``."""
    implied = preset_model_type(model.config_name) if model.config_name else None
    if implied is not None and model.model_type != implied:
        raise ctx.error(
            (*here, "config_name"),
            f"{model.config_name!r} is an edit preset (it serves /v1/images/edits); set "
            f"model_type: {implied}, or name a generation preset",
        )
    if model.lora_scales and len(model.lora_scales) != len(model.lora_paths):
        raise ctx.error(
            (*here, "lora_scales"),
            f"{len(model.lora_scales)} scale(s) for {len(model.lora_paths)} LoRA path(s); "
            "give one scale per entry of lora_paths, or none (1.0 each)",
        )
    for j, path in enumerate(model.lora_paths):
        if _looks_local(ctx.base_dir, path):
            resolved = _absolute(ctx.base_dir, path)
            if not os.path.exists(resolved):
                raise ctx.error(
                    (*here, "lora_paths", j),
                    f"LoRA file {resolved!r} does not exist; fix the path (relative paths "
                    "start from the config file's folder) or give a Hugging Face repo id",
                )
            model.lora_paths[j] = resolved
    width, _, height = model.size.partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ctx.error(
            (*here, "size"), f"expected 'WIDTHxHEIGHT' such as '1024x1024', got {_show(model.size)}"
        )
    w, h = int(width), int(height)
    if w % IMAGE_SIZE_MULTIPLE or h % IMAGE_SIZE_MULTIPLE:
        raise ctx.error(
            (*here, "size"),
            f"{model.size!r}: width and height must be multiples of {IMAGE_SIZE_MULTIPLE}",
        )
    if w * h > model.max_output_pixels:
        raise ctx.error(
            (*here, "size"),
            f"{model.size!r} is more than max_output_pixels ({model.max_output_pixels})",
        )


def _resolve_python(ctx: _Ctx, path: _KeyPath, value: str) -> str:
    if os.sep in value or value.startswith((".", "~")):
        resolved = _absolute(ctx.base_dir, value)
        if not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
            raise ctx.error(
                path,
                f"interpreter {resolved!r} does not exist or is not executable; point it at "
                "a virtualenv's bin/python",
            )
        return resolved
    found = shutil.which(value)
    if found is None:
        raise ctx.error(
            path,
            f"interpreter {value!r} is not on PATH; give its full path (e.g. .venv/bin/python)",
        )
    return os.path.abspath(found)
