"""What ``connect`` points a client at: the gateway's URL, a key, and a model.

* URL: ``--url``, else the config's host and port (as ``mlx-gateway status``
  finds them), else ``http://127.0.0.1:8000``.
* Key: ``--api-key``, else ``MLX_GATEWAY_API_KEY``, else the first of the config's
  ``api_keys``; none when the gateway has no keys.
* Model: ``--model``, else among the chat models (``lm``/``vlm``) that fit in the
  memory budget now (``GET /v1/models/{id}/fit`` of the running gateway; with no
  gateway to ask, the config's): for a coding client (one with :class:`Needs`),
  the one :func:`~.needs.choose` picks by context length; for others, the first.
  A model whose measured prefill speed (``prefill_tps``) makes the client's first
  request take longer than its watchdog gets a note (:func:`~.needs.slow_note`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.kinds import CHAT, MODEL_TYPES, kind_serves
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.connect.files import ConnectError
from mlx_gateway.supervisor.connect.needs import (
    Candidate,
    Needs,
    NoModelHolds,
    choose,
    fits_note,
    slow_note,
)
from mlx_gateway.supervisor.status import StatusError, default_url, fetch_models


def is_chat(model_type: str) -> bool:
    """Whether models of ``model_type`` answer chat (lm, vlm …; the kind table says)."""
    kind = MODEL_TYPES.get(model_type)
    return kind is not None and kind_serves(kind, CHAT)


@dataclass
class Target:
    url: str
    """The gateway without ``/v1`` (``http://127.0.0.1:8000``)."""
    key: str | None
    model: str
    models: list[str] = field(default_factory=list)
    """Every chat model it serves (the chosen one first)."""
    notes: list[str] = field(default_factory=list)
    windows: dict[str, int] = field(default_factory=dict)
    """The context length of each model whose length is known."""
    needs: Needs | None = None
    """What the client needs of a model (coding clients)."""

    @property
    def window(self) -> int | None:
        """The chosen model's context length (``None``: not known yet)."""
        return self.windows.get(self.model)

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"


def _get_json(url: str, key: str | None) -> Any:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def _fits(url: str, key: str | None, model: str) -> bool:
    quoted = urllib.parse.quote(model, safe="/")
    try:
        return bool(_get_json(f"{url}/v1/models/{quoted}/fit", key).get("fits"))
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return True  # a peer's model, or an older gateway: no answer is no refusal


def _chat_entries(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in entries if is_chat(str(e.get("model_type", "lm"))) and e.get("id")]


def _rate(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def _window(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def resolve(
    config: GatewayConfig | None,
    *,
    url: str | None,
    key: str | None,
    model: str | None,
    needs: Needs | None = None,
    force: bool = False,
) -> Target:
    base = (url or default_url(config)).rstrip("/")
    base = base.removesuffix("/v1")
    if key is None and config is not None:
        usable = [app.key for app in config.server.keys if app.role != "read-only"]
        if config.server.api_keys or usable:
            key = (config.server.api_keys or usable)[0]
    notes: list[str] = []
    aliases: set[str] = set()
    try:
        chat = _chat_entries(fetch_models(base, key))
        names = [str(e["id"]) for e in chat]
        aliases = {str(a) for e in chat for a in e.get("aliases") or ()}
        windows = {str(e["id"]): w for e in chat if (w := _window(e.get("context_window")))}
        rates = {str(e["id"]): r for e in chat if (r := _rate(e.get("prefill_tps")))}
        asked = True
    except StatusError as exc:
        rates = {}
        if " answered 401" in str(exc) or " answered 403" in str(exc):
            raise ConnectError(f"{exc}; give a key it takes with --api-key (or --config)") from None
        if config is None:
            if model is None:
                raise ConnectError(
                    f"{exc}; start the gateway, or name the model with --model "
                    "(and its config with --config)"
                ) from None
            names = []
            windows = {}
        else:
            chosen = [m for m in config.models if is_chat(m.model_type)]
            names = [m.served_model_name for m in chosen]
            aliases = {a for m in chosen for a in m.aliases}
            windows = {  # context_length only: the model's files are the gateway's to read
                m.served_model_name: w for m in chosen if (w := _window(m.context_length))
            }
            notes.append(f"{exc}: the model was chosen from the config, not asked")
        asked = False
    if model is None:
        if not names:
            raise ConnectError(
                "the gateway serves no chat model (model_type lm or vlm); add one to its config"
            )
        fitting = [n for n in names if _fits(base, key, n)] if asked else names
        if not fitting:
            raise ConnectError(
                f"no chat model fits in the memory budget now ({', '.join(names)}); "
                "name one with --model (see GET /v1/models/{id}/fit)"
            )
        model = fitting[0]
        if needs is not None:
            model = _by_needs(config, fitting, windows, needs, force, notes)
    elif names and model not in names and model not in aliases:
        served = ", ".join(names)
        raise ConnectError(f"the gateway serves no chat model '{model}'; its chat models: {served}")
    elif needs is not None and (warning := fits_note(model, windows.get(model), needs)):
        notes.append(warning)
    if needs is not None and (slow := slow_note(model, rates.get(model), needs)):
        notes.append(slow)
    ordered = [model, *(n for n in names if n != model)]
    return Target(
        url=base, key=key, model=model, models=ordered, notes=notes, windows=windows, needs=needs
    )


def _by_needs(
    config: GatewayConfig | None,
    fitting: list[str],
    windows: dict[str, int],
    needs: Needs,
    force: bool,
    notes: list[str],
) -> str:
    """The model :func:`choose` picks; with ``force``, the longest context when none
    holds the client's first request (the reason joins ``notes``)."""
    no_tools = {
        m.served_model_name
        for m in (config.models if config else [])
        if isinstance(m, TextModelConfig) and m.tool_call_parser == "none"
    }
    candidates = [Candidate(n, windows.get(n), n not in no_tools) for n in fitting]
    try:
        chosen, said = choose(candidates, needs)
    except NoModelHolds as exc:
        if not force:
            raise
        notes.append(f"{exc} (--force: written anyway)")
        return max(candidates, key=lambda c: c.window or 0).name
    notes.extend(said)
    return chosen.name
