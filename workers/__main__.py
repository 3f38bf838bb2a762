"""``python -m mlx_gateway.workers --endpoint ipc://… --spec '<WorkerSpec JSON>' --parent-pid N``

One worker process serves one model. Exit codes: 0 stopped on request (Shutdown,
SIGTERM) or the parent is gone; 1 crashed; 2 bad command line; 3 the model failed
to load (the reason was sent as ``Error(request_id="", status=503)``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import msgspec

from mlx_gateway.protocol.spec import WorkerSpec, decode_spec
from mlx_gateway.workers.runtime.process import configure_logging, run
from mlx_gateway.workers.runtime.ring import follow, rank


def parse_args(argv: list[str] | None = None) -> tuple[str, WorkerSpec, int | None]:
    parser = argparse.ArgumentParser(prog="python -m mlx_gateway.workers", description=__doc__)
    parser.add_argument("--endpoint", required=True, help="the gateway's ROUTER, e.g. ipc://PATH")
    parser.add_argument("--spec", required=True, help="the WorkerSpec as JSON")
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="exit when this process is gone"
    )
    args = parser.parse_args(argv)
    try:
        spec = decode_spec(args.spec)
    except msgspec.DecodeError as exc:
        parser.error(f"--spec: {exc}")
    return args.endpoint, spec, args.parent_pid


def main(argv: list[str] | None = None) -> None:
    endpoint, spec, parent_pid = parse_args(argv)
    configure_logging(spec.worker_id)
    if spec.options.get("distributed") and rank() > 0:
        code = follow(spec)  # a rank of a sharded model other than 0: no sockets
    else:
        code = run(endpoint, spec, parent_pid)
    logging.shutdown()
    sys.stderr.flush()
    # Never through interpreter finalization: the MLX thread may be inside a long
    # step, and even a finished one races its C++ thread-local teardown against
    # the interpreter's (seen as "terminate called without an active exception",
    # SIGABRT). The sockets are closed and flushed by now.
    os._exit(code)


if __name__ == "__main__":
    main()
