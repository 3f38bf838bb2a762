"""A turn made ready to start, and to start again: its checked request, its id, and
the server tools it offers (run by the :class:`~.tool_loop.ToolLoop` between its
rounds). Made once per request by :func:`prepare`, for the HTTP serve and for a
turn opened outside HTTP (a Realtime session's response)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from mlx_gateway.supervisor.engine.ask import (
    Ask,
    TextModel,
    conversation,
    start_turn,
    turn_request,
    with_server_tools,
)
from mlx_gateway.supervisor.engine.media_walk import MediaInputs
from mlx_gateway.supervisor.engine.server_tools import ServerTool, ServerToolSpec
from mlx_gateway.supervisor.engine.turns import Turn, TurnRequest
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.reply.server_tools import ToolMaker
from mlx_gateway.supervisor.reply.tool_loop import ToolLoop
from mlx_gateway.supervisor.tools import McpServers


@dataclass
class Opening:
    model: TextModel
    ask: Ask
    turn: TurnRequest
    request_id: str
    tools: dict[str, ServerTool]
    maker: ToolMaker | None = None
    max_rounds: int = 8

    def start_round(self, turn: TurnRequest, round_id: str) -> Awaitable[Turn]:
        return start_turn(self.model, turn, self.ask, round_id)

    def start(self) -> Awaitable[Turn]:
        """Start the turn (its first round); called again for a re-run."""
        maker = self.maker
        if maker is None or not (self.tools or maker.listed):
            return self.start_round(self.turn, self.request_id)
        return ToolLoop.begin(
            self.turn,
            self.tools,
            self.start_round,
            self.request_id,
            self.max_rounds,
            maker.listed,
            self.ask.approved,
            maker.aclose,
        )


logger = logging.getLogger(__name__)

_NARROWED: set[tuple[str, str]] = set()
"""The (app, model) pairs whose narrowed ``server_tools`` were logged (once each)."""


def entry_tools(
    model: TextModel, asked: list[ServerToolSpec], caller: Caller = ANONYMOUS
) -> list[ServerToolSpec]:
    """The config's MCP servers that the model's entry offers (``server_tools``) on
    every surface, those a request names itself aside, narrowed to the caller's
    ``tools`` (logged once per app and model)."""
    named = {spec.name for spec in asked if spec.kind == "mcp"}
    labels = [label for label in model.settings.server_tools or [] if label not in named]
    kept = [label for label in labels if caller.may_use(label)]
    left_out = [label for label in labels if label not in kept]
    if left_out and (caller.name, model.name) not in _NARROWED:
        _NARROWED.add((caller.name, model.name))
        logger.info(
            "app %s on %s: server_tools %s left out (not in the app's tools)",
            caller.name,
            model.name,
            ", ".join(left_out),
        )
    return [ServerToolSpec("mcp", type="mcp", name=label) for label in kept]


async def prepare(
    mcp: McpServers,
    model: TextModel,
    ask: Ask,
    inputs: MediaInputs | None,
    request_id: str,
    caller: Caller = ANONYMOUS,
) -> Opening:
    """``ask`` as a turn of ``model`` ready to start: its server tools made (listed
    from their servers), then the turn's request built and checked. Only the tools in
    the caller's scope exist for it (:func:`entry_tools`, :class:`ToolMaker`); the
    MCP servers ``mcp`` are the config's (with its ``tools`` settings)."""
    specs = [*ask.server_tools, *entry_tools(model, ask.server_tools, caller)]
    tools: dict[str, ServerTool] = {}
    maker = None
    rounds = 8
    if specs:
        maker = ToolMaker(mcp, caller)
        tools = await maker.make(specs, conversation(ask))
        rounds = mcp.config.max_rounds
        if tools:
            ask = with_server_tools(ask, tools)
    turn = turn_request(model, ask, inputs)
    return Opening(model, ask, turn, request_id, tools, maker, rounds)
