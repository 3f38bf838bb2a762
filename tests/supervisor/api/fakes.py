"""An in-process registry whose handles answer from a script: the API's handlers
tested without processes or sockets (the real registry is tested in test_gateway)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette

from mlx_gateway.protocol.messages import Chunk, Done, Generate, ModelFacts, Started, Usage
from mlx_gateway.supervisor.api import exception_handlers, routes
from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound, WorkerCrashed
from mlx_gateway.supervisor.gateway import Gateway, install
from mlx_gateway.supervisor.http.log_hub import LogHub
from mlx_gateway.supervisor.peers.directory import PeerDirectory
from mlx_gateway.supervisor.pool.adapters import AdapterSet
from mlx_gateway.supervisor.pool.names import Match, NameIndex
from mlx_gateway.supervisor.pool.routes import Route, RouteTable
from mlx_gateway.supervisor.pool.status import ModelStatus
from mlx_gateway.supervisor.recorder import Recorder
from mlx_gateway.supervisor.tools import McpServers


def defaults(**values: Any) -> ModelConfig:
    """A real model entry (no sampling defaults of its own unless given)."""
    return model_entry(model_path="fake", model_type="lm", **values)


def text_of(msg: Generate) -> str:
    if msg.messages:
        content = msg.messages[-1].get("content", "")
        if isinstance(content, list):
            return " ".join(part["text"] for part in content)
        return content
    return msg.prompt if isinstance(msg.prompt, str) else " ".join(map(str, msg.prompt or []))


@dataclass
class FakeHandle:
    """Answers by the first word of the last message: ``reject`` (400 before
    Started), ``crash`` (WorkerCrashed after two chunks), ``hang`` (never ends),
    ``boom`` (an unexpected exception mid-stream); else echoes the words."""

    name: str
    config: ModelConfig = field(default_factory=defaults)
    facts: ModelFacts | None = None
    load_error: GatewayError | None = None
    sent: list[Generate] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    inflight: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.config.served_model_name = self.name
        self.adapters = AdapterSet(self.config)

    def status(self) -> ModelStatus:
        return ModelStatus(state="ready", pid=123, inflight=self.inflight, context_length=256)

    @contextlib.asynccontextmanager
    async def session(self, priority: str = "interactive") -> AsyncIterator[FakeHandle]:
        self.inflight += 1
        try:
            if self.load_error is not None:
                raise self.load_error
            yield self
        finally:
            self.inflight -= 1

    def call(self, msg: Any, request_id: str, payloads: Any = ()) -> AsyncIterator[Any]:
        """Requests with binary payloads are answered like text ones (the payloads are
        not looked at)."""
        return self.generate(msg)

    async def generate(self, msg: Generate) -> AsyncIterator[Any]:
        self.sent.append(msg)
        words = text_of(msg).split()
        behaviour = words[0] if words else ""
        done = False
        try:
            if behaviour == "reject":
                raise GatewayError(
                    "too long", status=400, type="invalid_request_error",
                    param="messages", code="context_length_exceeded",
                )  # fmt: skip
            yield Started(request_id=msg.request_id, prompt_tokens=len(words))
            self.started.set()
            if behaviour == "hang":
                await asyncio.Event().wait()
            limit = msg.sampling.max_tokens
            sent = 0
            for word in words:
                if behaviour == "crash" and sent == 2:
                    raise WorkerCrashed("model 'm' worker killed by SIGKILL")
                if behaviour == "boom" and sent == 1:
                    raise RuntimeError("unexpected")
                await asyncio.sleep(0)
                yield Chunk(request_id=msg.request_id, text=word + " ", tokens=1)
                sent += 1
                if limit is not None and sent >= limit:
                    break
            reason = "length" if limit is not None and sent >= limit else "stop"
            done = True
            yield Done(
                request_id=msg.request_id,
                finish_reason=reason,
                usage=Usage(prompt_tokens=len(words), completion_tokens=sent, cached_tokens=1),
            )
        finally:
            (self.finished if done else self.cancelled).append(msg.request_id)


class FakeRegistry:
    placement = None  # no memory budget in process

    def __init__(self, *handles: FakeHandle) -> None:
        self.handles = list(handles)
        self.config = GatewayConfig(models=[h.config for h in handles])
        self.routes: RouteTable[FakeHandle] = RouteTable([], {})

    def route(self, name: str) -> Route[FakeHandle] | None:
        return None  # no routes in process (tests/supervisor/api/test_routes_*.py: live)

    def visible_routes(self) -> list[Route[FakeHandle]]:
        return []

    def lookup(self, name: str) -> Match[FakeHandle] | None:
        return NameIndex(self.handles).find(name)  # the real registry's lookup

    def resolve(self, name: str) -> FakeHandle:
        if (found := self.lookup(name)) is None:
            raise ModelNotFound(name, [h.name for h in self.handles])
        return found.handle

    def visible(self) -> list[FakeHandle]:
        return self.handles  # no key scopes in process

    def served_names(self) -> list[str]:
        return [h.name for h in self.handles]


def gateway_around(registry: Any) -> Gateway:
    """The services of a gateway whose models are ``registry`` (a real one, or a
    :class:`FakeRegistry`), as the lifespan of create_app builds them: no peers, the
    config's MCP servers (none started), a log hub, empty stores."""
    config = registry.config
    return Gateway(
        config, registry, Recorder(), PeerDirectory([]), McpServers(config.tools), LogHub()
    )


def routes_app(registry: Any) -> Starlette:
    """The gateway's routes over ``registry``, without create_app's middleware and
    lifespan: its services built as the lifespan builds them."""
    app = Starlette(routes=routes, exception_handlers=exception_handlers)
    install(app, gateway_around(registry))
    return app


def make_app(*handles: FakeHandle) -> Starlette:
    return routes_app(FakeRegistry(*handles))
