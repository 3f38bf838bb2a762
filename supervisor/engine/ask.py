"""What a surface asks of a language model, in the engine's words, and the one way
from that ask to a started :class:`~.turns.Turn`.

Every text surface (chat completions, completions, the Responses API, Anthropic
Messages, Ollama's chat and generate, Realtime) is a dialect: its *into* half turns
its request into an :class:`Ask` without knowing the model, its *out* half turns
the turn's events into its frames or its whole body. Everything between the two
happens here and in :mod:`...reply.serve`, once: the model's kind is checked and
the handle narrowed to a :class:`TextModel`; the sampling settings fall back to the
model's defaults; the chat template's variables, the LoRA adapters and the checks
of what the kind cannot do are worked out; the turn starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import INTERACTIVE, Priority
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine.adapters import adapters_for
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS, kind_of, require_kind
from mlx_gateway.supervisor.engine.media_walk import MediaInputs
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.sampling import sampling_params
from mlx_gateway.supervisor.engine.server_tools import ApprovedCall, ServerTool, ServerToolSpec
from mlx_gateway.supervisor.engine.tools import OutputSpec, ToolSpec
from mlx_gateway.supervisor.engine.turns import (
    CONSTRAINED_KINDS,
    Turn,
    TurnRequest,
    template_kwargs,
)
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


@dataclass
class Ask:
    """One turn as a surface asks for it, before its model is known.

    ``messages`` are chat-completions messages (plain dicts, image parts not read
    yet); a ``prompt`` instead goes to the model as it is (no chat template, no
    parsers: ``/v1/completions``, Ollama's ``raw``)."""

    model: str
    """The name the client sent."""
    endpoint: str
    """The route, as errors name it (``/v1/messages``)."""
    sampling: SamplingFields
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt: str | list[int] | None = None
    kinds: tuple[str, ...] = CHAT_KINDS
    """The worker kinds that serve this endpoint."""
    keep_alive: float | str | None = None
    """Ollama's ``keep_alive`` (seconds or a duration), accepted by every surface."""
    ttl: float | None = None
    """LM Studio's ``ttl`` (seconds); ``keep_alive`` wins."""
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    thinking_budget: int | None = None
    tools: ToolSpec = field(default_factory=ToolSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    logprobs: int | None = None
    logprobs_param: str = "logprobs"
    n: int = 1
    stops: list[str] = field(default_factory=list)
    adapter: str | None = None
    call_id_prefix: str = "call_"
    server_tools: list[ServerToolSpec] = field(default_factory=list)
    """Tools the gateway runs itself (web search, web fetch, MCP servers' tools)."""
    server_choice: str | None = None
    """A server tool the first round must call (the name the model sees it by)."""
    approved: list[ApprovedCall] = field(default_factory=list)
    """Calls that waited for the client's approval, answered in this request."""
    id_prefix: str = "turn-"
    """How the request's id begins (``chatcmpl-``, ``msg_``): the id names its
    generations on the worker and its object in the answer."""
    params: Mapping[str, str] = field(default_factory=dict)
    """The engine's names of request fields (chat completions') → the surface's own,
    for errors: the Responses API's ``input`` is the engine's ``messages``."""
    part_labels: list[str] | None = None
    """What each of ``messages`` is in the surface's own request (Anthropic's
    ``system``, ``messages[i]``), for the log's word on where a prompt left the
    cache (:mod:`.prompt_parts`); ``None``: ``messages[i]`` of chat completions."""
    priority: Priority = INTERACTIVE
    """Set by the serve: the caller's priority, ``batch`` with ``service_tier: flex``
    (:mod:`...reply.priority`)."""


@dataclass(frozen=True)
class TextModel:
    """A model that takes turns: its handle, its settings and its kind, worked out once."""

    handle: ModelHandle
    settings: TextModelConfig
    kind: str

    @property
    def name(self) -> str:
        return self.handle.name

    @property
    def constrained(self) -> bool:
        """Whether its worker does log-probabilities and constrained decoding."""
        return self.kind in CONSTRAINED_KINDS


def text_model(handle: ModelHandle, kinds: tuple[str, ...], endpoint: str) -> TextModel:
    """``handle`` as a :class:`TextModel`; a 400 naming where it is served when its
    kind is not one of ``kinds``."""
    require_kind(handle, kinds, endpoint)
    settings = handle.config
    assert isinstance(settings, TextModelConfig), settings
    return TextModel(handle, settings, kind_of(handle))


def conversation(ask: Ask) -> list[dict[str, Any]]:
    """The ask's messages as the chat template wants them."""
    return for_template(ask.messages)


def turn_request(model: TextModel, ask: Ask, inputs: MediaInputs | None = None) -> TurnRequest:
    """The :class:`TurnRequest` of ``ask`` for ``model`` (``inputs``: its messages with
    their images read), refused here when the model's kind cannot do it."""
    messages = inputs.messages if inputs is not None else conversation(ask)
    turn = TurnRequest(
        messages=[] if ask.prompt is not None else messages,
        prompt=ask.prompt,
        sampling=sampling_params(ask.sampling, model.settings),
        template_kwargs=template_kwargs(ask.chat_template_kwargs, ask.tools, ask.enable_thinking),
        thinking_budget=ask.thinking_budget,
        adapters=adapters_for(model.handle, ask.adapter),
        tools=ask.tools,
        output=ask.output,
        logprobs=ask.logprobs,
        n=ask.n,
        stops=ask.stops,
        files=inputs.files if inputs is not None else (),
        images=inputs.frame_indices if inputs is not None else [],
        call_id_prefix=ask.call_id_prefix,
        priority=ask.priority,
    )
    check_turn(model, turn, ask.logprobs_param)
    return turn


def check_turn(model: TextModel, turn: TurnRequest, logprobs_param: str = "logprobs") -> None:
    """Refuse what the model's kind cannot do, before any worker starts."""
    if model.constrained:
        return
    handle = model.handle
    if turn.output.kind != "text":
        raise BadRequest(
            f"Structured output ({turn.output.kind}) needs a model of model_type lm; "
            f"'{handle.name}' is {handle.config.model_type}.",
            param=turn.output.param.split(".")[0],
        )
    if turn.logprobs is not None:
        raise BadRequest(
            f"Log-probabilities need a model of model_type lm; '{handle.name}' is "
            f"{handle.config.model_type}.",
            param=logprobs_param,
        )


async def start_turn(model: TextModel, turn: TurnRequest, ask: Ask, request_id: str) -> Turn:
    """:meth:`Turn.start`, a rejection worded in the surface's field names."""
    try:
        return await Turn.start(model.handle, turn, request_id)
    except GatewayError as exc:
        reword(exc, ask.params)
        raise


def reword(exc: GatewayError, params: Mapping[str, str]) -> None:
    """Name the fields of ``exc`` as the surface does (``messages`` → ``input``)."""
    if not params:
        return
    if exc.code == "context_length_exceeded" and "messages" in params:
        for word in ("the", "your"):
            exc.message = exc.message.replace(f"{word} messages", f"{word} {params['messages']}")
    if exc.param is not None and exc.param in params:
        exc.param = params[exc.param]


def with_server_tools(ask: Ask, tools: dict[str, ServerTool]) -> Ask:
    """``ask`` with the server tools offered to the model beside the client's
    functions (a forced server tool, if named, for the first round)."""
    own = ask.tools
    functions = [*own.functions, *(tool.function for tool in tools.values())]
    choice = own.choice
    if ask.server_choice is not None:
        if ask.server_choice not in tools:
            offered = ", ".join(sorted(tools)) or "none"
            raise BadRequest(
                f"The tool choice names the server tool '{ask.server_choice}', which this "
                f"request does not offer (server tools: {offered}).",
                param="tool_choice",
            )
        choice = ask.server_choice
    spec = ToolSpec(functions, choice, own.parallel, placed=own.placed)
    return dataclasses.replace(ask, tools=spec)
