"""``mlx-gateway`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from mlx_gateway.protocol.kinds import DEFAULT_MODEL_TYPE
from mlx_gateway.supervisor import pull, status
from mlx_gateway.supervisor.config import (
    ConfigError,
    GatewayConfig,
    config_from_model_path,
    load_config,
    override_server,
)
from mlx_gateway.supervisor.config.launch_flags import add_launch_flags, flag_values
from mlx_gateway.supervisor.config.sizes import parse_size
from mlx_gateway.supervisor.connect import cli as connect_cli
from mlx_gateway.supervisor.http.auth import exposure_warning
from mlx_gateway.supervisor.logs import log_file_path, setup_logging
from mlx_gateway.supervisor.service import cli as service_cli
from mlx_gateway.supervisor.usage import cli as usage_cli

log = logging.getLogger("mlx_gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlx-gateway", description="Serve many local MLX models through the OpenAI API."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    launch = sub.add_parser("launch", help="start the gateway")
    source = launch.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="YAML file listing the models to serve")
    source.add_argument(
        "--model-path",
        "--model",
        help="serve this one model (HF repo id or directory); --model as in mlx_lm.server",
    )
    launch.add_argument("--host", help="override server.host")
    launch.add_argument("--port", type=int, help="override server.port")
    launch.add_argument("--log-level", help="override server.log_level")
    launch.add_argument(
        "--watch",
        action="store_true",
        help="reload the models when the config file changes (SIGHUP always reloads)",
    )
    launch.add_argument("--log-format", choices=("text", "json"), help="override server.log_format")
    flags = launch.add_argument_group(
        "one-model flags (mlx-openai-server's, mlx_lm.server's; docs/configuration.md)"
    )
    add_launch_flags(flags)
    status.add_parser(sub)
    usage_cli.add_parser(sub)
    pull.add_parser(sub)
    connect_cli.add_parser(sub)
    service_cli.add_parser(sub)
    convert = sub.add_parser(
        "convert-whisper",
        help="convert a CTranslate2 (faster-whisper) Whisper model to mlx-whisper's format",
    )
    convert.add_argument("src", help="directory holding the CTranslate2 model.bin")
    convert.add_argument("dst", help="output directory (config.json, weights.safetensors)")
    convert.add_argument(
        "--dtype",
        choices=("float16", "float32"),
        default="float16",
        help="dtype of the stored weights (default: float16)",
    )
    return parser


def convert_whisper(args: argparse.Namespace) -> int:
    # Imported here: the converter is a store module that needs numpy (no MLX), and
    # `launch` must not pay for numpy.
    try:
        from mlx_gateway.store.whisper_convert import ConversionError, convert
    except ModuleNotFoundError as exc:
        print(
            f"mlx-gateway: convert-whisper needs the whisper extra ({exc.name} is missing): "
            "pip install 'mlx-gateway[whisper]'",
            file=sys.stderr,
        )
        return 1

    try:
        done = convert(args.src, args.dst, dtype=args.dtype)
    except (ConversionError, OSError) as exc:
        print(f"mlx-gateway: convert-whisper: {exc}", file=sys.stderr)
        return 1
    config = done.config
    print(
        f"wrote {done.weights} ({done.tensors} tensors, {args.dtype}) and config.json in "
        f"{done.seconds:.2f} s: {config['n_audio_layer']}+{config['n_text_layer']} layers, "
        f"width {config['n_text_state']}, vocabulary {config['n_vocab']}"
    )
    return 0


def resolve_config(args: argparse.Namespace) -> GatewayConfig:
    overrides = {
        key: value
        for key, value in (
            ("host", args.host),
            ("port", args.port),
            ("log_level", args.log_level),
            ("log_format", args.log_format),
        )
        if value is not None
    }
    from mlx_gateway.supervisor.pool.placement import check_fits

    server_flags, model_flags = flag_values(args)
    if args.config:
        if model_flags:
            given = ", ".join(sorted(model_flags))
            raise ConfigError(
                f"{given}: per-model flags go with --model-path; with --config, "
                "set them on the model in the file"
            )
        config = override_server(load_config(args.config), **overrides, **server_flags)
    else:
        model_type = model_flags.pop("model_type", DEFAULT_MODEL_TYPE)
        config = config_from_model_path(
            args.model_path,
            model_type=model_type,
            model_options=model_flags,
            **overrides,
            **server_flags,
        )
    check_fits(config)  # warns about each model too big for the budget
    return config


async def serve(config: GatewayConfig, config_path: str | None = None, watch: bool = False) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig

    from mlx_gateway.supervisor.app import create_app
    from mlx_gateway.supervisor.shutdown import graceful_timeout, shutdown_trigger

    host, port = config.server.host, config.server.port
    hconfig = HypercornConfig()
    hconfig.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    hconfig.accesslog = None
    hconfig.errorlog = logging.getLogger("hypercorn.error")
    hconfig.graceful_timeout = graceful_timeout(config.server)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    names = ", ".join(model.served_model_name for model in config.models)
    log.info("serving %s on http://%s:%d/v1", names, host, port)
    warning = exposure_warning(
        host, [*config.server.api_keys, *(app.key for app in config.server.keys)]
    )
    if warning:
        log.warning(warning)
    app = create_app(config)
    tasks: set[asyncio.Task[Any]] = set()
    if config_path is not None:
        from mlx_gateway.supervisor.reload import reload_from, watch_file

        def on_hup() -> None:
            task = asyncio.create_task(reload_from(config_path, app))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        loop.add_signal_handler(signal.SIGHUP, on_hup)
        if watch:
            tasks.add(asyncio.create_task(watch_file(config_path, app)))
    trigger = shutdown_trigger(app, stop)
    await hypercorn_serve(app, hconfig, shutdown_trigger=trigger)  # type: ignore[arg-type]
    for task in tasks:
        task.cancel()
    log.info("gateway stopped")


def configure_logging(config: GatewayConfig) -> None:
    """The gateway's logging as ``config.server`` says: stderr, and the log file
    (rotated) when one is set."""
    server = config.server
    setup_logging(
        server.log_level,
        server.log_format,
        file=log_file_path(server.log_file, server.log_path, server.no_log_file),
        rotate_bytes=parse_size(server.log_rotation),
        keep=server.log_retention,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "status":
        return status.run(args)
    if args.command == "usage":
        return usage_cli.run(args)
    if args.command == "pull":
        return pull.run(args)
    if args.command == "connect":
        return connect_cli.run(args)
    if args.command == "service":
        return service_cli.run(args)
    if args.command == "convert-whisper":
        return convert_whisper(args)
    if args.command == "launch":
        try:
            config = resolve_config(args)
        except ConfigError as exc:
            print(f"mlx-gateway: configuration error: {exc}", file=sys.stderr)
            return 2
        configure_logging(config)
        asyncio.run(serve(config, config_path=args.config, watch=args.watch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
