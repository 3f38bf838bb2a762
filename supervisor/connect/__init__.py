"""``mlx-gateway connect CLIENT``: point a client at this gateway by merging into
the client's own config file, keeping every other setting and a backup of the
original; ``--undo`` restores it. One module per client."""

from __future__ import annotations

from mlx_gateway.supervisor.connect import claude_code, codex, continue_dev, open_webui, opencode
from mlx_gateway.supervisor.connect.client import Client

CLIENTS: dict[str, Client] = {
    c.CLIENT.name: c.CLIENT for c in (claude_code, codex, opencode, continue_dev, open_webui)
}

__all__ = ["CLIENTS", "Client"]
