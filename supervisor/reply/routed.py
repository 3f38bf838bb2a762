"""Which model answers a request: the one its name names, or one of a route's
(:mod:`...pool.routes`), tried in the order its strategy gives.

:func:`choose` finds the candidates once, for every text surface and for
embeddings; :class:`Routed` starts the turn on the first candidate that starts (a
failure *before the first byte* that the strategy moves on from sends it to the
next; after that a failure ends the answer as for any model) and remembers the
one that answered: the serve names it in the ``x-mlx-gateway-model`` header and
the dialect in the answer's ``model``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mlx_gateway.supervisor.engine.ask import Ask, TextModel, text_model
from mlx_gateway.supervisor.engine.kinds import require_kind
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.routes import Route
from mlx_gateway.supervisor.reply.opening import Opening

logger = logging.getLogger(__name__)

MODEL_HEADER = "x-mlx-gateway-model"
"""The response header naming the model that answered (its served name)."""

T = TypeVar("T")
M = TypeVar("M")


@dataclass
class Choice(Generic[M]):
    """The models that may answer a request, in order: the one it names, or its
    route's; ``session`` is the route's affinity key (``prompt_cache_key``/``user``)."""

    models: list[M]
    route: Route[Any] | None = None
    session: str | None = None


def session_of(ask: Ask) -> str | None:
    """The key a route keeps a conversation on one model by: the request's
    ``prompt_cache_key``, else its ``user``."""
    fields = ask.sampling
    return fields.prompt_cache_key or fields.user or None


def candidates(
    registry: Registry, name: str, kinds: tuple[str, ...], endpoint: str, session: str | None
) -> Choice[ModelHandle]:
    """The handles that may answer ``name`` at ``endpoint`` (serving one of
    ``kinds``): a route's models in its strategy's order, those of another kind left
    out; a 400 (or 404) as for a model when none can."""
    route = registry.route(name)
    if route is None:
        handle: ModelHandle = registry.resolve(name)
        require_kind(handle, kinds, endpoint)
        return Choice([handle])
    ordered: Sequence[ModelHandle] = route.order(session)
    usable = [h for h in ordered if _serves(h, kinds, endpoint)]
    if not usable:
        require_kind(ordered[0], kinds, endpoint)  # raises: worded as for a model
    return Choice(usable, route, session)


def _serves(handle: ModelHandle, kinds: tuple[str, ...], endpoint: str) -> bool:
    try:
        require_kind(handle, kinds, endpoint)
    except GatewayError:
        return False
    return True


def choose(registry: Registry, ask: Ask) -> Choice[TextModel]:
    """The text models that may answer ``ask`` (see :func:`candidates`)."""
    found = candidates(registry, ask.model, ask.kinds, ask.endpoint, session_of(ask))
    models = [text_model(h, ask.kinds, ask.endpoint) for h in found.models]
    return Choice(models, found.route, found.session)


async def first_started(
    choice: Choice[M],
    name: Callable[[M], str],
    attempt: Callable[[M, int], Awaitable[T]],
) -> tuple[M, T]:
    """``attempt(model, i)`` on each model of ``choice`` in turn until one starts;
    the next is tried only for a failure its route moves on from, and when every
    model failed the last failure is raised."""
    route = choice.route
    models: Sequence[M] = choice.models
    for i, model in enumerate(models):
        try:
            started = await attempt(model, i)
        except GatewayError as exc:
            if route is None or i == len(models) - 1 or not route.moves_on(exc):
                raise
            logger.warning(
                "route %s: %s could not answer (%s); trying %s",
                route.name,
                name(model),
                exc.message,
                name(models[i + 1]),
            )
            continue
        if route is not None:
            route.answered(choice.session, model)
        return model, started
    raise AssertionError("a choice has at least one model")


class Routed:
    """The start of one request's turn over its :class:`Choice`: ``opening`` is the
    first model's (prepared before the answer began, so that a bad request is a
    plain HTTP error); another model's is prepared by ``open_on`` when the request
    moves on to it, and ``begun`` tells the reply which model answers."""

    def __init__(
        self,
        choice: Choice[TextModel],
        opening: Opening,
        open_on: Callable[[TextModel], Awaitable[Opening]],
        begun: Callable[[TextModel], None],
    ) -> None:
        self.choice = choice
        self.opening = opening
        self.served: TextModel | None = None
        self._open_on = open_on
        self._begun = begun

    async def start(self) -> Any:
        """The started turn (a re-run starts again on the model that answered)."""
        if self.served is not None or self.choice.route is None:
            running = await self.opening.start()
            self.served = self.opening.model
            return running

        async def attempt(model: TextModel, i: int) -> tuple[Opening, Any]:
            opening = self.opening if i == 0 else await self._open_on(model)
            return opening, await opening.start()

        model, (opening, running) = await first_started(self.choice, lambda m: m.name, attempt)
        if model is not self.opening.model:
            self._begun(model)
        self.opening, self.served = opening, model
        return running

    def name_on(self, response: Any) -> Any:
        """``response`` with the answering model's header, when it is known already."""
        if self.served is not None:
            response.headers[MODEL_HEADER] = self.served.name
        return response
