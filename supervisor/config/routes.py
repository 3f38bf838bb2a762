"""The ``routes:`` section: served names that stand for a list of models.

Each entry ``{name, strategy, models}`` is a name a request may give like any
model's, answered by one of ``models`` (served names or aliases of ``models:``
entries, in order of preference) as ``strategy`` picks it:

* ``fallback``: the first that answers; the next one when a model fails to load,
  is refused by the memory budget, is at capacity or fails before its first byte;
* ``spillover``: the first whose queue has room (the next one on a 429 at capacity);
* ``warm``: a loaded one (the first loaded), else the first; then as ``fallback``.

A route names models only: a route naming another route is refused (its models
can be listed instead), so a request never goes round in a circle. A route's name
may not be a model's name or alias, in any case or with ``:latest`` (Ollama's
clients write names either way), nor another route's.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from mlx_gateway.supervisor.config.context import _Ctx, _show
from mlx_gateway.supervisor.config.entry import ModelConfig
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

STRATEGIES = ("fallback", "spillover", "warm")

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

_Name = Annotated[str, msgspec.Meta(min_length=1)]


class RouteConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    name: _Name
    strategy: Literal["fallback", "spillover", "warm"] = "fallback"
    models: Annotated[tuple[_Name, ...], msgspec.Meta(min_length=1)]


def _folded(name: str) -> str:
    # The loosest key of pool/names.py (no tag, ASCII lower case); config never
    # imports the pool, so the fold is written out here.
    return name.removesuffix(":latest").translate(_ASCII_LOWER)


def check_routes(ctx: _Ctx, routes: list[RouteConfig], models: list[ModelConfig]) -> None:
    """Each route's name is its own and each of its models is a model of the file."""
    served: dict[str, str] = {}
    for model in models:
        for name in model.names:
            served.setdefault(name, model.served_model_name)
    folded = {_folded(name): name for name in served}
    routes_by_name: dict[str, int] = {}
    for i, route in enumerate(routes):
        here: _KeyPath = ("routes", i)
        if any(c.isspace() for c in route.name):
            raise ctx.error((*here, "name"), f"{_show(route.name)} cannot be a name: it has spaces")
        if (clash := folded.get(_folded(route.name))) is not None:
            raise ctx.error(
                (*here, "name"),
                f"the route name {route.name!r} is already a name of the model {clash!r} "
                "(names compare without ':latest' and in any case); give the route its own name",
            )
        if (j := routes_by_name.get(_folded(route.name))) is not None:
            raise ctx.error(
                (*here, "name"),
                f"the route name {route.name!r} is already used by routes[{j}]; "
                "give each route its own name",
            )
        routes_by_name[_folded(route.name)] = i
    names = {route.name for route in routes}
    for i, route in enumerate(routes):
        seen: set[str] = set()
        for j, member in enumerate(route.models):
            at: _KeyPath = ("routes", i, "models", j)
            if member in names:
                raise ctx.error(
                    at,
                    f"{member!r} is a route; a route lists models only: write the models of "
                    f"route {member!r} here instead",
                )
            if member not in served:
                offered = ", ".join(m.served_model_name for m in models)
                raise ctx.error(
                    at,
                    f"{member!r} is not a served_model_name or alias of models: (here: {offered})",
                )
            if served[member] in seen:
                raise ctx.error(
                    at, f"the model {served[member]!r} is already in this route; list it once"
                )
            seen.add(served[member])
