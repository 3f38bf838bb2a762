"""What types cannot express about the whole file: server sizes, peers, the Wyoming
and Realtime models, groups, unique names, routes; each entry's own checks are its kind's
(``ModelConfig.check``, ``config/kinds/<kind>.py``)."""

from __future__ import annotations

import logging

from mlx_gateway.protocol.kinds import SPEECH, TRANSCRIPTION, kinds_serving
from mlx_gateway.supervisor.config.apps import BUILTIN_TOOLS, in_scope
from mlx_gateway.supervisor.config.context import _Ctx, _display, _show
from mlx_gateway.supervisor.config.routes import check_routes
from mlx_gateway.supervisor.config.schema import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

log = logging.getLogger("mlx_gateway.supervisor.config")

# --------------------------------------------------------------------------- checks


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


def _check_keys(ctx: _Ctx, config: GatewayConfig) -> None:
    """Each app of ``server.keys`` has its own name and its own key (one key, one
    app: the key says who calls), and ``server.wyoming.key`` names one of them."""
    server = config.server
    names: dict[str, int] = {}
    owners: dict[str, str] = {}
    for key in server.api_keys:
        owners.setdefault(key, "server.api_keys")
    for key in server.admin_keys:
        owners[key] = "server.admin_keys"
    for j, app in enumerate(server.keys):
        if app.name in names:
            raise ctx.error(
                ("server", "keys", j, "name"),
                f"the app name {app.name!r} is already used by server.keys[{names[app.name]}]; "
                "give each app its own name",
            )
        names[app.name] = j
        source = next(s for s in ("key_env", "key_file", "key") if getattr(app, s) is not None)
        if app.key in owners:
            raise ctx.error(
                ("server", "keys", j, source),
                f"app {app.name!r} has the same key as {owners[app.key]}; give each app "
                "its own key (the key is how the gateway knows who calls)",
            )
        owners[app.key] = f"server.keys[{j}] ({app.name!r})"
        _warn_unmatched(ctx, j, app.name, "models", app.models or [], config)
        _warn_unmatched(ctx, j, app.name, "tools", app.tools or [], config)
    wyoming = server.wyoming
    if wyoming is not None and wyoming.key is not None and wyoming.key not in names:
        listed = ", ".join(names) or "none"
        raise ctx.error(
            ("server", "wyoming", "key"),
            f"{wyoming.key!r} is no app of server.keys (here: {listed}); name the app "
            "Wyoming acts as",
        )


def _warn_unmatched(
    ctx: _Ctx, j: int, name: str, field: str, patterns: list[str], config: GatewayConfig
) -> None:
    """A scope entry (``models`` or ``tools`` of an app) that matches nothing of the
    file is most likely a typo; it is no error (models pulled later, ``/api/pull``,
    may match it)."""
    if field == "models":
        known = tuple(alias for model in config.models for alias in model.names)
        what = "matches no model of this file (yet); the app cannot use it until one is added"
    else:
        known = (*config.tools.mcp_servers, *BUILTIN_TOOLS)
        what = (
            f"names no tool of this gateway (its tools: {', '.join(known)}); the app cannot use it"
        )
    for k, pattern in enumerate(patterns):
        if not in_scope([pattern], known):
            path: _KeyPath = ("server", "keys", j, field, k)
            where = ctx.where(ctx.positions.get(path))
            log.warning("%s%s: app %r: %r %s", _display(path), where, name, pattern, what)


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


def _check_realtime(ctx: _Ctx, config: GatewayConfig) -> None:
    """``realtime:`` names a whisper and a tts model of this file."""
    kinds = {name: model.worker_kind for model in config.models for name in model.names}
    wanted = (
        ("transcription_model", config.realtime.transcription_model, TRANSCRIPTION),
        ("speech_model", config.realtime.speech_model, SPEECH),
    )
    for key, name, surface in wanted:
        if name is not None and kinds.get(name) not in kinds_serving(surface):
            offered = ", ".join(n for n, k in kinds.items() if k in kinds_serving(surface))
            what = "is not a model of this file" if name not in kinds else f"serves no {surface}"
            raise ctx.error(("realtime", key), f"{name!r} {what} (here: {offered or 'none'})")


def _check_server_tools(ctx: _Ctx, config: GatewayConfig) -> None:
    """A model's ``server_tools`` name servers of ``tools.mcp_servers``."""
    served = config.tools.mcp_servers
    for i, model in enumerate(config.models):
        for j, label in enumerate(getattr(model, "server_tools", ())):
            if label not in served:
                listed = ", ".join(served) or "none"
                raise ctx.error(
                    ("models", i, "server_tools", j),
                    f"{label!r} is no MCP server of tools.mcp_servers (here: {listed})",
                )


def _check(ctx: _Ctx, config: GatewayConfig) -> None:
    _check_sizes(ctx, config)
    _check_server_tools(ctx, config)
    _check_realtime(ctx, config)
    _check_peers(ctx, config)
    _check_wyoming(ctx, config)
    _check_keys(ctx, config)
    _check_groups(ctx, config)
    seen: dict[str, _KeyPath] = {}
    for i, model in enumerate(config.models):
        here: _KeyPath = ("models", i)
        clash = model.served_model_name in seen
        ctx.labels[i] = model.model_path if clash else model.served_model_name
        model.check(ctx, here)  # its kind's checks (config/kinds/<kind>.py)
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
    check_routes(ctx, config.routes, config.models)


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
