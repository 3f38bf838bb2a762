"""A gateway with fake workers in its own process, so a test can kill it with SIGKILL.

``python tests/supervisor/peer_process.py --port P --model NAME[=fake/MODE] [--api-key K]``
serves on 127.0.0.1:P until killed (its fake workers follow it: ``--parent-pid``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main() -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from mlx_gateway.supervisor.app import create_app
    from tests.supervisor.fakes import fake_command, fake_config

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--api-key", action="append", default=[])
    args = parser.parse_args()
    models = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        models.append({"model_path": path or "fake/ok", "served_model_name": name})
    app = create_app(
        fake_config(*models, port=args.port, api_keys=args.api_key), command=fake_command
    )
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
