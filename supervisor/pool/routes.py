"""Routes at run time: a route's name → the models that may answer it, in the
order its strategy tries them (:mod:`...config.routes` says what each does).

A request's session (its ``prompt_cache_key``, else its ``user``) sticks to the
model that last answered it on that route while that model stays loaded, so the
model's prompt cache is reused: :meth:`Route.order` puts it first, and
:meth:`Route.answered` records it. The table is kept per route, bounded (the
oldest sessions are forgotten first), and kept across a reload for a route
whose entry did not change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.pool.names import STEPS

SESSIONS_KEPT = 10_000
"""How many sessions a route remembers (the least recently used go first)."""


class _Served(Protocol):
    @property
    def name(self) -> str: ...

    def status(self) -> object: ...


H = TypeVar("H", bound=_Served)


def loaded(handle: _Served) -> bool:
    """Whether ``handle``'s worker is up and ready."""
    return getattr(handle.status(), "state", None) == "ready"


class Route(Generic[H]):
    """One route: its entry, its models' handles and its sessions."""

    def __init__(self, config: RouteConfig, members: Sequence[H]) -> None:
        self.config = config
        self.members = list(members)
        self._sessions: OrderedDict[str, str] = OrderedDict()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def strategy(self) -> str:
        return self.config.strategy

    def order(self, session: str | None = None) -> list[H]:
        """The models to try, in order: the session's own model first while it is
        loaded; for ``warm`` the loaded ones before the others; else config order."""
        members = list(self.members)
        if self.strategy == "warm":
            members.sort(key=lambda h: not loaded(h))  # stable: config order within
        sticky = self._sessions.get(session) if session else None
        for i, handle in enumerate(members):
            if handle.name == sticky and loaded(handle):
                members.insert(0, members.pop(i))
                break
        return members

    def answered(self, session: str | None, handle: H) -> None:
        """``handle`` answered ``session``: its next requests go there first."""
        if not session:
            return
        self._sessions[session] = handle.name
        self._sessions.move_to_end(session)
        while len(self._sessions) > SESSIONS_KEPT:
            self._sessions.popitem(last=False)

    def moves_on(self, exc: GatewayError) -> bool:
        """Whether a failure to start on one model sends the request to the next:
        for ``spillover`` a full queue (429 at capacity); for ``fallback`` and
        ``warm`` that too and any server-side failure (5xx: a load that failed, the
        memory budget, a worker that died or failed before its first byte). A 4xx
        is the request's own fault, and is the answer."""
        if exc.code == "model_at_capacity":
            return True
        return self.strategy != "spillover" and exc.status >= 500

    def carry_sessions(self, old: Route[H]) -> None:
        self._sessions = old._sessions


class RouteNotServed(ModelNotFound):
    """A route named where only a model can serve (Realtime, an image, audio or admin
    call): a 400 naming its models."""

    status = 400

    def __init__(self, route: Route[H]) -> None:
        GatewayError.__init__(
            self,
            f"'{route.name}' is a route ({route.strategy} over "
            f"{', '.join(h.name for h in route.members)}); routes answer the HTTP text "
            "and embeddings endpoints only (not Realtime, images, audio, rerank, "
            "tokenize or the admin calls): name one of its models here",
            param="model",
            code="route_not_supported",
        )
        self.name, self.served = route.name, [h.name for h in route.members]


class RouteTable(Generic[H]):
    """Every route by name, found as model names are (:mod:`.names`: exact, then
    without ``:latest``, then in any case)."""

    def __init__(
        self,
        configs: Iterable[RouteConfig],
        handles: Mapping[str, H],
        old: RouteTable[H] | None = None,
    ) -> None:
        self.routes: list[Route[H]] = []
        for config in configs:
            route = Route(config, [handles[name] for name in config.models if name in handles])
            before = old.exact(config.name) if old is not None else None
            if before is not None and before.config == config:
                route.carry_sessions(before)
            self.routes.append(route)
        self._tables: list[dict[str, Route[H]]] = []
        for key in STEPS:
            table: dict[str, Route[H]] = {}
            for route in self.routes:
                table.setdefault(key(route.name), route)
            self._tables.append(table)

    def exact(self, name: str) -> Route[H] | None:
        return self._tables[0].get(name) if self._tables else None

    def find(self, name: str) -> Route[H] | None:
        for key, table in zip(STEPS, self._tables, strict=True):
            if (found := table.get(key(name))) is not None:
                return found
        return None
