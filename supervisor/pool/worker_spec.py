"""What a model's worker is started with: its :class:`WorkerSpec` (the model's
settings the worker needs, kind-specific options included), its command line
(plain, or through ``mlx.launch`` for a distributed model) and its environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.blas import openblas_for, with_preload
from mlx_gateway.supervisor.pool.bytecode import (
    default_folder,
    packages_writable,
    with_bytecode_cache,
)
from mlx_gateway.supervisor.pool.spawn import WorkerCommand, distributed_command, worker_command


def spec_for(config: ModelConfig, worker_id: str, heartbeat_interval: float = 2.0) -> WorkerSpec:
    return WorkerSpec(
        heartbeat_interval=heartbeat_interval,
        worker_id=worker_id,
        kind=config.worker_kind,
        model_path=config.model_path,
        served_model_name=config.served_model_name,
        context_length=config.fixed_context_length,  # auto: set at spawn
        chat_template_file=config.chat_template_file,
        trust_remote_code=config.trust_remote_code,
        max_concurrency=config.max_concurrency,
        prefill_batch_size=config.prefill_batch_size,
        prefill_step_size=config.prefill_step_size,
        options=kind_options(config),
    )


def worker_environment(
    config: ModelConfig, server: ServerConfig, extra: Mapping[str, str]
) -> dict[str, str]:
    """The environment a model's worker starts with: the gateway's own, unbuffered
    output, ``extra`` (the registry's), the model's ``worker_env``; then OpenBLAS
    preloaded (:mod:`.blas`; the model's ``preload_openblas``, else the server's) and
    the bytecode cache (:mod:`.bytecode`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra, **config.worker_env}
    own = config.preload_openblas
    preload = server.preload_openblas if own is None else own
    if (openblas := openblas_for(preload, config.worker_env)) is not None:
        env = with_preload(env, openblas)
    if server.bytecode_cache:
        # Another interpreter's packages are not ours to check: only the variable counts.
        writable = config.python is not None or packages_writable()
        env = with_bytecode_cache(env, config.worker_env, default_folder(), writable)
    return env


def kind_options(config: ModelConfig) -> dict[str, Any]:
    """The kind-specific settings of ``config`` for ``WorkerSpec.options``
    (``worker_options`` of its kind's Struct, ``config/kinds/<kind>.py``)."""
    return config.worker_options()


def start_options(
    config: ModelConfig, server: ServerConfig, kv_budget: int | None, adapters: AdapterSet
) -> dict[str, Any]:
    """What a worker is told at each start beyond its entry: the KV cache bytes its
    requests are admitted against, and for a language model its prompt cache's disk
    tier and the adapters mounted now (run-time mounts included)."""
    options: dict[str, Any] = {}
    if kv_budget is not None:
        options["kv_budget_bytes"] = kv_budget  # per-request admission
    options.update(config.start_options(server, adapters.paths() if len(adapters) else {}))
    return options


def default_command(config: ModelConfig) -> WorkerCommand:
    spread = config.distributed
    if spread is not None:
        return lambda spec, endpoint: distributed_command(
            spec, endpoint, spread, python=config.python, env=config.worker_env
        )
    return lambda spec, endpoint: worker_command(spec, endpoint, python=config.python)
