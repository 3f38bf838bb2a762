"""One turn of a language model, whatever API asked for it.

Chat completions, the Responses API and Anthropic Messages all come down to the
same thing: a conversation in the chat-completions shape, sampling settings,
tools, an output format, ``n`` choices. :meth:`Turn.start` sends one ``Generate``
per choice (the worker batches them) and waits until every one was accepted, so a
rejection is still a plain HTTP error. Each choice's text then runs through the
model's parsers (thinking blocks, tool calls, stop sequences the gateway applies
itself) and comes out as :data:`TurnEvent`\\ s, which each API formats its own way.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from msgspec.structs import replace

from mlx_gateway.protocol.kinds import CONSTRAINED, kinds_serving
from mlx_gateway.protocol.messages import (
    INTERACTIVE,
    Constraint,
    Done,
    Generate,
    Priority,
    SamplingParams,
    TokenLogprob,
    Usage,
)
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine import overflow
from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.engine.kinds import kind_of
from mlx_gateway.supervisor.engine.parsers.formats import resolve_tool_format
from mlx_gateway.supervisor.engine.parsers.grammars import json_document
from mlx_gateway.supervisor.engine.parsers.markers import StopScanner
from mlx_gateway.supervisor.engine.parsers.reasoning import (
    ThinkMarkers,
    make_splitter,
    resolve_reasoning,
)
from mlx_gateway.supervisor.engine.parsers.tool_calls import ToolCallStream, ToolFormat
from mlx_gateway.supervisor.engine.tools import OutputSpec, ToolSpec
from mlx_gateway.supervisor.errors import ContextLengthExceeded
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

CONSTRAINED_KINDS = kinds_serving(CONSTRAINED)
"""Worker kinds that do log-probabilities and constrained decoding."""
WORKER_PARSED = "tokenizer"
"""The tool-call format the worker parses with its tokenizer's own parser."""


@dataclass
class TurnRequest:
    """Everything one turn needs, in the chat-completions vocabulary."""

    messages: list[dict[str, Any]]
    sampling: SamplingParams
    prompt: str | list[int] | None = None
    """A prompt the model gets as it is, instead of ``messages``: no chat template,
    no parsers (``/v1/completions``, Ollama's ``raw``)."""
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: ToolSpec = field(default_factory=ToolSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    logprobs: int | None = None
    """Top alternatives per token (0 to 20); ``None``: no log-probabilities."""
    n: int = 1
    stops: list[str] = field(default_factory=list)
    """Stop sequences the gateway applies itself (it then knows which one matched)."""
    files: Sequence[bytes] = ()
    images: list[int] = field(default_factory=list)
    call_id_prefix: str = "call_"
    thinking_budget: int | None = None
    """Most tokens inside one thinking block (the worker closes it); ``None``: no limit."""
    adapters: list[str] = field(default_factory=list)
    """LoRA adapters the worker applies (see :mod:`.adapters`)."""
    priority: Priority = INTERACTIVE
    """``batch``: the worker lets interactive requests go first."""


# ---------------------------------------------------------------- events


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class TextDelta:
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass(frozen=True)
class ToolCallMade:
    """One complete tool call: ``index`` counts the calls of the choice from 0."""

    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Finished:
    """The choice ended. ``reason``: ``stop``, ``length``, ``tool_calls`` or ``cancelled``."""

    reason: str
    usage: Usage
    stop_sequence: str | None = None
    reasoning_tokens: int = 0


TurnEvent = ReasoningDelta | TextDelta | ToolCallMade | Finished


@dataclass
class ChoiceResult:
    """A whole choice (for answers that are not streamed)."""

    index: int
    text: str = ""
    reasoning: str = ""
    calls: list[ToolCallMade] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish: Finished | None = None


# ---------------------------------------------------------------- the turn


def template_kwargs(
    base: dict[str, Any] | None, tools: ToolSpec, enable_thinking: bool | None = None
) -> dict[str, Any]:
    """The chat template's extra variables: the client's own, ``tools`` in the
    chat-completions shape the templates expect, ``enable_thinking`` when asked."""
    kwargs = dict(base or {})
    if tools.functions and "tools" not in kwargs:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": f.name,
                    **({"description": f.description} if f.description else {}),
                    "parameters": f.parameters or {"type": "object", "properties": {}},
                },
            }
            for f in tools.functions
        ]
    if enable_thinking is not None:
        kwargs.setdefault("enable_thinking", enable_thinking)
    return kwargs


def text_settings(handle: ModelHandle) -> TextModelConfig:
    """The settings of ``handle``'s model, a language or vision model."""
    return settings_as(handle.config, TextModelConfig)


def _extra(handle: ModelHandle) -> dict[str, str]:
    """What the worker reported of its model (chat template markers…), once ready."""
    return handle.facts.extra if handle.facts is not None else {}


def reasoning_markers(handle: ModelHandle) -> ThinkMarkers | None:
    """The model's thinking markers (its config's reasoning parser, else those its
    worker found in the chat template); ``None``: it writes no thinking blocks."""
    config = handle.config
    parser = config.reasoning_parser if isinstance(config, TextModelConfig) else None
    return resolve_reasoning(parser, _extra(handle))


def tool_format(handle: ModelHandle) -> ToolFormat | None:
    """The model's tool-call format (its config, else what its worker reported)."""
    return resolve_tool_format(text_settings(handle).tool_call_parser, _extra(handle))


def constraint_for(handle: ModelHandle, turn: TurnRequest) -> Constraint | None:
    """The grammar a turn's output must follow, if any: a forced tool call in the
    model's own format, else the ``response_format``'s JSON."""
    if kind_of(handle) not in CONSTRAINED_KINDS:
        return None
    if turn.tools.forced:
        fmt = tool_format(handle)
        parallel = turn.tools.parallel and turn.tools.choice == "required"
        try:
            grammar = fmt.grammar(turn.tools.callable(), parallel) if fmt else None
        except (ValueError, TypeError):
            grammar = None  # a format this schema cannot be forced into: parse freely
        return Constraint(grammar, param="tools") if grammar else None
    if turn.output.kind == "json_object":
        return Constraint(json_document(None), param=turn.output.param)
    if turn.output.kind == "json_schema":
        return Constraint(json_document(turn.output.schema), param=turn.output.param)
    return None


class Turn:
    """The running choices of one turn. Always :meth:`aclose` it."""

    def __init__(
        self, handle: ModelHandle, turn: TurnRequest, generations: list[Generation]
    ) -> None:
        self.handle = handle
        self.request = turn
        self.generations = generations
        self._tasks: list[asyncio.Task[Any]] = []

    @classmethod
    async def start(cls, handle: ModelHandle, turn: TurnRequest, request_id: str) -> Turn:
        """Send the turn's ``n`` requests and wait until each was accepted; the first
        rejection is raised (after the others were cancelled). A conversation too
        long for the context goes through the model's ``context_overflow`` policy
        (see :mod:`.overflow`) and is tried once more."""
        policy = text_settings(handle).context_overflow
        raw = turn.prompt is not None
        if raw or policy == "error" or kind_of(handle) not in CONSTRAINED_KINDS:
            return await cls._start(handle, turn, request_id)
        try:
            return await cls._start(handle, turn, request_id)
        except ContextLengthExceeded as exc:
            if policy == "truncate":
                clamp = text_settings(handle).max_tokens_overflow == "clamp"
                messages = await overflow.truncate(
                    handle, turn.messages, turn.template_kwargs, exc, clamp
                )
            else:

                async def summarizer(request: list[dict[str, Any]], max_tokens: int) -> str:
                    sampling = replace(overflow.summary_sampling(), max_tokens=max_tokens)
                    summary = TurnRequest(
                        messages=request,
                        sampling=sampling,
                        template_kwargs={"enable_thinking": False},
                    )
                    running = await cls._start(handle, summary, f"{request_id}-summary")
                    try:
                        (result,) = await running.collect()
                    finally:
                        await running.aclose()
                    return result.text

                async def count(messages: list[dict[str, Any]]) -> int:
                    return await overflow.count_tokens(handle, messages, {"enable_thinking": False})

                messages = await overflow.summarize(turn.messages, summarizer, count, exc)
        return await cls._start(handle, dataclasses.replace(turn, messages=messages), request_id)

    @classmethod
    async def _start(cls, handle: ModelHandle, turn: TurnRequest, request_id: str) -> Turn:
        recorder.note_turn()

        def prepare(msg: Generate) -> Generate:
            fmt = tool_format(handle) if turn.tools.active else None
            worker_parsed = fmt is not None and fmt.name == WORKER_PARSED
            return replace(msg, constraint=constraint_for(handle, turn), parse_tools=worker_parsed)

        messages = []
        for i in range(turn.n):
            sampling = turn.sampling
            if i and sampling.seed is not None:  # n seeded choices must still differ
                sampling = replace(sampling, seed=(sampling.seed + i) % 2**64)
            messages.append(
                Generate(
                    request_id=request_id if turn.n == 1 else f"{request_id}-{i}",
                    messages=turn.messages if turn.prompt is None else None,
                    prompt=turn.prompt,
                    sampling=sampling,
                    chat_template_kwargs=turn.template_kwargs,
                    images=turn.images,
                    logprobs=turn.logprobs,
                    thinking_budget=turn.thinking_budget,
                    adapters=turn.adapters,
                    priority=turn.priority,
                )
            )
        starts = [
            asyncio.ensure_future(Generation.start(handle, m, turn.files, prepare))
            for m in messages
        ]
        failure: BaseException | None = None
        try:
            await asyncio.wait(starts, return_when=asyncio.FIRST_EXCEPTION)
        except BaseException as exc:  # cancelled: the client left
            failure = exc
        for task in starts:
            if not task.done():
                task.cancel()
        await asyncio.wait(starts)
        if failure is None:
            failure = next(
                (t.exception() for t in starts if not t.cancelled() and t.exception()), None
            )
        if failure is None:
            return cls(handle, turn, [t.result() for t in starts])
        for task in starts:
            if not task.cancelled() and task.exception() is None:
                await task.result().aclose()
        raise failure

    def plain(self) -> bool:
        """Whether the turn needs none of the parsers: one choice of text, no tools,
        no log-probabilities, no thinking markers (its chunks can be relayed as they are)."""
        request = self.request
        return (
            request.n == 1
            and not request.tools.active
            and request.logprobs is None
            and (request.prompt is not None or reasoning_markers(self.handle) is None)
        )

    def choice(self, index: int) -> AsyncIterator[TurnEvent]:
        """The events of choice ``index``, ending with :class:`Finished`."""
        return _ChoiceParser(self, index).events()

    async def merged(self) -> AsyncIterator[tuple[int, TurnEvent]]:
        """The events of every choice as they come, each with its choice index."""
        if len(self.generations) == 1:
            async for event in self.choice(0):
                yield 0, event
            return
        queue: asyncio.Queue[tuple[int, TurnEvent | BaseException | None]] = asyncio.Queue()

        async def pump(index: int) -> None:
            try:
                async for event in self.choice(index):
                    await queue.put((index, event))
            except Exception as exc:
                await queue.put((index, exc))
            await queue.put((index, None))

        self._tasks = [asyncio.ensure_future(pump(i)) for i in range(len(self.generations))]
        running = len(self._tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item

    async def collect(self) -> list[ChoiceResult]:
        """Every choice run to its end."""

        async def one(index: int) -> ChoiceResult:
            result = ChoiceResult(index)
            async for event in self.choice(index):
                match event:
                    case ReasoningDelta(text=text):
                        result.reasoning += text
                    case TextDelta(text=text, logprobs=logprobs):
                        result.text += text
                        result.logprobs += logprobs
                    case ToolCallMade():
                        result.calls.append(event)
                    case Finished():
                        result.finish = event
            return result

        tasks = [asyncio.ensure_future(one(i)) for i in range(len(self.generations))]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            # The other choices stop iterating before their generations are closed.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def aclose(self) -> None:
        """Stop whatever still runs (idempotent): unfinished choices are cancelled."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        for generation in self.generations:
            await generation.aclose()


def finish_reason(done: Done | None, matched: str | None, calls: int) -> str:
    """A choice's finish: the token limit wins (``length``, also after complete
    calls: a call it cut off was dropped), then ``tool_calls`` when it made any,
    then ``stop`` for a stop sequence, else what the worker said."""
    if matched is None and done is not None and done.finish_reason == "length":
        return "length"
    if calls:
        return "tool_calls"
    if matched is not None:
        return "stop"
    return done.finish_reason if done else "stop"


class _ChoiceParser:
    """The parsers of one choice, from worker chunks to :data:`TurnEvent`\\ s."""

    def __init__(self, turn: Turn, index: int) -> None:
        self.generation = turn.generations[index]
        request = turn.request
        started = self.generation.started
        raw = request.prompt is not None  # no template, so nothing to parse
        markers = None if raw else reasoning_markers(turn.handle)
        self.splitter = (
            make_splitter(markers, inside=bool(started and started.reasoning)) if markers else None
        )
        fmt = tool_format(turn.handle) if request.tools.active and not raw else None
        self.parallel = request.tools.parallel
        self.calls = (
            ToolCallStream(fmt, request.tools.parsed(), parallel=request.tools.parallel)
            if fmt and fmt.name != WORKER_PARSED
            else None
        )
        self.stopper = StopScanner(request.stops) if request.stops else None
        self.prompt_tokens = started.prompt_tokens if started else 0
        self.new_id: Callable[[], str] = lambda: f"{request.call_id_prefix}{uuid4().hex[:24]}"
        self.made = 0
        self.logprobs: list[TokenLogprob] = []

    async def events(self) -> AsyncIterator[TurnEvent]:
        generated = reasoning_tokens = 0
        done: Done | None = None
        async for reply in self.generation:
            if isinstance(reply, Done):
                done = reply
                break
            generated += reply.tokens
            self.logprobs += reply.logprobs
            text = self.stopper.feed(reply.text) if self.stopper else reply.text
            pieces = self.splitter.feed(text) if self.splitter else [("content", text)]
            if pieces and all(kind == "reasoning" for kind, _ in pieces):
                reasoning_tokens += reply.tokens
            for event in self._route(pieces):
                yield event
            for name, arguments in reply.tool_calls:  # parsed by the worker's tokenizer
                if self.made and not self.parallel:
                    continue
                yield ToolCallMade(self.made, self.new_id(), name, arguments)
                self.made += 1
            if self.stopper and self.stopper.matched is not None:
                break  # the turn's aclose cancels the rest on the worker
        tail = self.stopper.finish() if self.stopper else ""
        pieces = [("content", tail)] if tail else []
        if self.splitter:
            pieces = self.splitter.feed(tail) + self.splitter.finish()
        for event in self._route(pieces):
            yield event
        matched = self.stopper.matched if self.stopper else None
        cut = matched is None and done is not None and done.finish_reason == "length"
        if self.calls:
            for event in self._calls(self.calls.finish(cut=cut)):
                yield event
        if self.logprobs:
            yield TextDelta("", self._take_logprobs())
        usage = done.usage if done else Usage(self.prompt_tokens, generated)
        yield Finished(finish_reason(done, matched, self.made), usage, matched, reasoning_tokens)

    def _take_logprobs(self) -> list[TokenLogprob]:
        taken, self.logprobs = self.logprobs, []
        return taken

    def _route(self, pieces: Sequence[tuple[str, str]]) -> list[TurnEvent]:
        out: list[TurnEvent] = []
        for kind, text in pieces:
            if not text:
                continue
            if kind == "reasoning":
                out.append(ReasoningDelta(text))
            elif self.calls is None:
                out.append(TextDelta(text, self._take_logprobs()))
            else:
                out += self._calls(self.calls.feed(text))
        return out

    def _calls(self, events: list[Any]) -> list[TurnEvent]:
        out: list[TurnEvent] = []
        for event in events:
            if isinstance(event, str):
                out.append(TextDelta(event, self._take_logprobs()))
            else:
                out.append(ToolCallMade(self.made, self.new_id(), event.name, event.arguments))
                self.made += 1
        return out
