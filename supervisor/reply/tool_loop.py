"""The tool loop: a turn whose model may call tools that the gateway runs itself.

A round is one model run. When it called server tools (and no client tool), the
loop runs the calls (at once, each bounded by its own time limit), appends the
model's message and the results to the conversation, and starts the next round.
It stops when a round calls no server tool, when a client's function tool was
called (the turn ends as any turn does: the client runs it), when the token budget
of the request (``max_tokens`` over all rounds, as OpenAI and Anthropic count it)
is spent, or after ``max_rounds`` rounds; then one more round runs without the
server tools, told why, so that the answer is whole. A forced tool choice applies
to the first round only.

The loop is a :class:`~...engine.turns.Turn` to the surfaces: its events are the
rounds' text and reasoning, a :class:`ServerToolCall` and :class:`ServerToolResult`
per call, the client's tool calls, and one :class:`Finished` whose usage adds up
the rounds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from msgspec.structs import replace

from mlx_gateway.protocol.messages import Usage
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.server_tools import (
    ApprovedCall,
    ServerTool,
    ServerToolApproval,
    ServerToolCall,
    ServerToolResult,
    ServerToolsListed,
    ToolOutcome,
)
from mlx_gateway.supervisor.engine.tools import ToolSpec
from mlx_gateway.supervisor.engine.turns import (
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallMade,
    Turn,
    TurnEvent,
    TurnRequest,
    template_kwargs,
)
from mlx_gateway.supervisor.errors import BadRequest

logger = logging.getLogger(__name__)

LIMIT_NOTE = (
    "The tool round limit of this request was reached ({rounds} rounds): answer now "
    "from the results above, without calling tools."
)
"""What the last, tool-free round is told."""

LoopEvent = TurnEvent | ServerToolCall | ServerToolResult | ServerToolsListed | ServerToolApproval

Start = Callable[[TurnRequest, str], Awaitable[Turn]]
"""Starts one round: the turn request and its request id."""


class ToolLoop(Turn):
    """Rounds of a turn with server tools; see the module's docstring."""

    def __init__(
        self,
        first: Turn,
        tools: dict[str, ServerTool],
        start: Start,
        request_id: str,
        max_rounds: int,
        listed: list[ServerToolsListed] | None = None,
        ran: list[LoopEvent] | None = None,
        closing: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(first.handle, first.request, first.generations)
        self.round = first
        self.tools = tools
        self.start_round = start
        self.request_id = request_id
        self.max_rounds = max_rounds
        self.listed = listed or []
        self.ran = ran or []
        """Events of the calls the client approved, run before the first round."""
        self.rounds = 1
        self.closing = closing
        """What else ends with the turn (the MCP servers the request named by URL)."""

    @classmethod
    async def begin(
        cls,
        turn: TurnRequest,
        tools: dict[str, ServerTool],
        start: Start,
        request_id: str,
        max_rounds: int,
        listed: list[ServerToolsListed] | None = None,
        approved: list[ApprovedCall] | None = None,
        closing: Callable[[], Awaitable[None]] | None = None,
    ) -> ToolLoop:
        """Run the calls the client approved (or tell the model it refused), then
        start the first round (its rejection is the request's error)."""
        ran: list[LoopEvent] = []
        if approved:
            calls = [ToolCallMade(i, c.id, c.name, c.arguments) for i, c in enumerate(approved)]
            for call in calls:
                if call.name not in tools:
                    raise BadRequest(
                        f"The approved call {call.id} names the tool '{call.name}', which "
                        "this request does not offer: send the same MCP tool again.",
                        param="input",
                    )
            refused = {c.id: c for c in approved if not c.approve}
            results = await _run(tools, [c for c in calls if c.id not in refused])
            for call in calls:
                if call.id in refused:
                    why = refused[call.id].reason
                    text = "The user did not approve this call" + (f": {why}" if why else ".")
                    results.append(
                        ServerToolResult(call.id, tools[call.name], {}, ToolOutcome(text, True))
                    )
            for call in calls:
                ran.append(ServerToolCall(call.id, tools[call.name], call.arguments))
                ran += [r for r in results if r.id == call.id]
            turn = _grown(turn, "", calls, results)
        first = await start(turn, request_id)
        return cls(first, tools, start, request_id, max_rounds, listed, ran, closing)

    def plain(self) -> bool:
        return False

    def choice(self, index: int) -> AsyncIterator[Any]:
        return self._events()

    async def _events(self) -> AsyncIterator[LoopEvent]:
        for listed in self.listed:
            yield listed
        for event in self.ran:
            yield event
        total = Usage()
        budget = self.request.sampling.max_tokens
        turn = self.request
        reasoning_tokens = 0
        while True:
            calls: list[ToolCallMade] = []
            waiting = False
            client_call = False
            text: list[str] = []
            finish: Finished | None = None
            final = self.rounds > self.max_rounds  # the tool-free round after the limit
            async for event in self.round.choice(0):
                match event:
                    case ToolCallMade(name=name) if name in self.tools and final:
                        logger.info(
                            "%s: %s called after the round limit: not run", self.request_id, name
                        )
                    case ToolCallMade(name=name) if name in self.tools:
                        tool = self.tools[name]
                        if tool.spec.require_approval == "always":
                            waiting = True
                            yield ServerToolApproval(event.id, tool, event.arguments)
                        else:
                            calls.append(event)
                            yield ServerToolCall(event.id, tool, event.arguments)
                    case ToolCallMade():
                        client_call = True
                        yield event
                    case Finished():
                        finish = event
                    case TextDelta(text=piece):
                        text.append(piece)
                        yield event
                    case ReasoningDelta():
                        yield event
            await self.round.aclose()
            assert finish is not None
            total = _add(total, finish.usage)
            reasoning_tokens += finish.reasoning_tokens
            spent = total.completion_tokens
            over = budget is not None and spent >= budget
            results = await _run(self.tools, calls) if calls else []
            for result in results:
                yield result
            if not calls or client_call or over or waiting:
                reason = "length" if over and not client_call else finish.reason
                if final and not client_call and reason == "tool_calls":
                    reason = "stop"  # only dropped server calls: the answer ended
                yield Finished(reason, total, finish.stop_sequence, reasoning_tokens)
                return
            last = self.rounds >= self.max_rounds
            turn = self._next(turn, "".join(text), calls, results, budget, spent, last)
            self.rounds += 1
            self.round = await self.start_round(turn, f"{self.request_id}-{self.rounds}")
            self.generations = self.round.generations

    def _next(
        self,
        turn: TurnRequest,
        text: str,
        calls: list[ToolCallMade],
        results: list[ServerToolResult],
        budget: int | None,
        spent: int,
        last: bool,
    ) -> TurnRequest:
        """The next round's request: the conversation grown by the model's calls and
        their results; with the deferred tools a search loaded; no forced choice;
        without the server tools in the last round."""
        if last:
            note = LIMIT_NOTE.format(rounds=self.max_rounds)
            last_result = results[-1]
            outcome = dataclasses.replace(
                last_result.outcome, text=f"{last_result.outcome.text}\n\n{note}"
            )
            results = [*results[:-1], dataclasses.replace(last_result, outcome=outcome)]
            logger.info(
                "%s: tool round limit (%d) reached; the last round runs without server tools",
                self.request_id,
                self.max_rounds,
            )
        functions = turn.tools.functions
        offered = {f.name for f in functions}
        for result in results:  # the deferred tools a search loaded
            for function in result.outcome.loaded:
                if function.name not in offered:
                    offered.add(function.name)
                    functions = [*functions, function]
        if last:
            functions = [f for f in functions if f.name not in self.tools]
        placed = turn.tools.placed
        choice = "auto" if functions or placed else "none"
        tools = ToolSpec(functions, choice, turn.tools.parallel, placed=placed)
        sampling = turn.sampling
        if budget is not None:
            sampling = replace(sampling, max_tokens=max(budget - spent, 1))
        kwargs = dict(turn.template_kwargs)
        kwargs.pop("tools", None)
        grown = _grown(turn, text, calls, results)
        return dataclasses.replace(
            grown, tools=tools, sampling=sampling, template_kwargs=template_kwargs(kwargs, tools)
        )

    async def aclose(self) -> None:
        await self.round.aclose()
        await super().aclose()
        if self.closing is not None:
            closing, self.closing = self.closing, None
            await closing()


async def _run(tools: dict[str, ServerTool], calls: list[ToolCallMade]) -> list[ServerToolResult]:
    """Run ``calls`` at once; a failure is an error result for the model."""

    async def one(call: ToolCallMade) -> ServerToolResult:
        tool = tools[call.name]
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            outcome = ToolOutcome(
                f"The arguments of {call.name} are not a JSON object: {call.arguments!r}",
                is_error=True,
            )
            return ServerToolResult(call.id, tool, {}, outcome)
        try:
            outcome = await tool.run(arguments)
        except Exception as exc:  # a tool's failure goes back to the model
            logger.warning("server tool %s failed: %s", call.name, exc)
            outcome = ToolOutcome(f"{call.name} failed: {exc}", is_error=True)
        return ServerToolResult(call.id, tool, arguments, outcome)

    return list(await asyncio.gather(*(one(call) for call in calls)))


def _grown(
    turn: TurnRequest, text: str, calls: list[ToolCallMade], results: list[ServerToolResult]
) -> TurnRequest:
    """``turn`` with the model's calls and their results appended."""
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
    by_id = {r.id: r for r in results}
    answers = [
        {"role": "tool", "tool_call_id": c.id, "content": by_id[c.id].outcome.text} for c in calls
    ]
    return dataclasses.replace(
        turn, messages=[*turn.messages, *for_template([assistant, *answers])]
    )


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        draft_proposed=a.draft_proposed + b.draft_proposed,
        draft_accepted=a.draft_accepted + b.draft_accepted,
    )
