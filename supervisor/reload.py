"""Config reload on SIGHUP or when the file changes (``launch --watch``).

Only the ``models:`` and ``routes:`` sections reload (see :meth:`Registry.reload`):
unchanged models keep running, changed ones are replaced after their in-flight
requests finish, new ones appear, removed ones stop; the routes are replaced. A
broken new file is rejected with its error and the running config stays.
"""

from __future__ import annotations

import asyncio
import logging
import os

from starlette.applications import Starlette

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.gateway import started
from mlx_gateway.supervisor.pool.placement import check_fits

log = logging.getLogger("mlx_gateway.reload")


async def reload_from(path: str, app: Starlette) -> dict[str, list[str]] | None:
    """Load ``path`` and apply it to the running registry; ``None`` when rejected."""
    try:
        new = load_config(path)
        check_fits(new)
    except ConfigError as exc:
        log.error("config reload rejected, the running config stays: %s", exc)
        return None
    gateway = started(app)
    if gateway is None:
        log.warning("config reload ignored: the gateway is not started yet")
        return None
    registry = gateway.registry
    if new.server != registry.config.server:
        log.warning("config reload: the server section changed; restart the gateway to apply it")
    return await registry.reload(new)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


async def watch_file(path: str, app: Starlette, interval: float = 1.0) -> None:
    """Reload whenever the file's modification time changes."""
    last = _mtime(path)
    while True:
        await asyncio.sleep(interval)
        current = _mtime(path)
        if current is not None and current != last:
            last = current
            log.info("%s changed: reloading", path)
            await reload_from(path, app)
