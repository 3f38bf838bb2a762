"""The gateway's logging: human-readable lines, or one JSON object per line.

JSON lines carry ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``model`` (or ``null``) and ``message``, plus ``exc`` with the traceback when
there is one. The model is the record's ``model`` attribute when the code passed
it (``extra={"model": name}``); otherwise it is read from the ``"[name] …"``
prefix the supervisor puts on every line about a model, which is then left out
of the message. A worker's own output (logger ``mlx_gateway.worker.output``) is
logged that way, so each of its lines names its model.
"""

from __future__ import annotations

import datetime
import logging
import logging.handlers
import os
import sys
from typing import Any, Literal

import msgspec

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_encoder = msgspec.json.Encoder()


def split_model(record: logging.LogRecord) -> tuple[str | None, str]:
    """The model a record is about and its message without the ``[model]`` prefix."""
    model = getattr(record, "model", None)
    message = record.getMessage()
    if isinstance(model, str):
        return model, message
    template = record.msg if isinstance(record.msg, str) else ""
    args = record.args if isinstance(record.args, tuple) else ()
    if not args or not isinstance(args[0], str):
        return None, message
    # The name comes from the first argument, not from parsing the text: a model
    # name may hold "]" itself. Two spellings: "[%s] …" % name, "%s …" % "[name]".
    first = args[0]
    if template.startswith("[%s]"):
        name, prefix = first, f"[{first}]"
    elif template.startswith("%s") and first.startswith("[") and first.endswith("]"):
        name, prefix = first[1:-1], first
    else:
        return None, message
    if message.startswith(prefix):
        return name, message[len(prefix) :].lstrip(" ")
    return None, message


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        model, message = split_model(record)
        ts = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        entry: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "model": model,
            "message": message,
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _encoder.encode(entry).decode()


def log_file_path(
    log_file: str | None, log_path: str | None, no_log_file: bool = False
) -> str | None:
    """The file the log goes to besides stderr: ``log_file``, else ``app.log`` in
    the ``log_path`` directory; ``None`` with ``no_log_file`` or neither set."""
    if no_log_file:
        return None
    if log_file:
        return log_file
    return os.path.join(log_path, "app.log") if log_path else None


def setup_logging(
    level: str,
    fmt: Literal["text", "json"] = "text",
    *,
    file: str | None = None,
    rotate_bytes: int = 10 * 1024 * 1024,
    keep: int = 5,
) -> None:
    """Log to stderr at ``level`` in ``fmt``, and to ``file`` when given (rotated
    at ``rotate_bytes`` into ``file.1`` … ``file.<keep>``); replaces any earlier
    setup. The file's folder is created."""
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    else:
        formatter = logging.Formatter(TEXT_FORMAT, datefmt="%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if file is not None:
        os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
        handlers.append(
            logging.handlers.RotatingFileHandler(
                file, maxBytes=rotate_bytes, backupCount=keep, encoding="utf-8"
            )
        )
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=handlers, force=True)
