"""A turn made ready to start, and to start again: its checked request, its id, and
the server tools it offers (run by the :class:`~.tool_loop.ToolLoop` between its
rounds). Made once per request by :func:`prepare`, for the HTTP serve and for a
turn opened outside HTTP (a Realtime session's response)."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from mlx_gateway.supervisor.engine.ask import (
    Ask,
    TextModel,
    conversation,
    start_turn,
    turn_request,
    with_server_tools,
)
from mlx_gateway.supervisor.engine.server_tools import ServerTool, ServerToolSpec
from mlx_gateway.supervisor.engine.turns import Turn, TurnRequest
from mlx_gateway.supervisor.engine.vision_input import ImageInputs
from mlx_gateway.supervisor.reply.server_tools import ToolMaker
from mlx_gateway.supervisor.reply.tool_loop import ToolLoop


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


def entry_tools(model: TextModel, asked: list[ServerToolSpec]) -> list[ServerToolSpec]:
    """The config's MCP servers that the model's entry offers (``server_tools``) on
    every surface, those a request names itself aside."""
    named = {spec.name for spec in asked if spec.kind == "mcp"}
    labels = model.settings.server_tools or []
    return [ServerToolSpec("mcp", type="mcp", name=label) for label in labels if label not in named]


async def prepare(
    state: Any,
    model: TextModel,
    ask: Ask,
    inputs: ImageInputs | None,
    request_id: str,
    key: str = "-",
) -> Opening:
    """``ask`` as a turn of ``model`` ready to start: its server tools made (listed
    from their servers), then the turn's request built and checked."""
    specs = [*ask.server_tools, *entry_tools(model, ask.server_tools)]
    tools: dict[str, ServerTool] = {}
    maker = None
    rounds = 8
    if specs:
        config = state.config.tools
        maker = ToolMaker(config, getattr(state, "mcp", None), key)
        tools = await maker.make(specs, conversation(ask))
        rounds = config.max_rounds
        if tools:
            ask = with_server_tools(ask, tools)
    turn = turn_request(model, ask, inputs)
    return Opening(model, ask, turn, request_id, tools, maker, rounds)
