"""``POST /v1/completions`` (legacy text completions)."""

from __future__ import annotations

import time
from typing import Any

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Generate
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.engine.adapters import adapters_for
from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import COMPLETION_KINDS, require_kind
from mlx_gateway.supervisor.engine.objects import Completion, CompletionChoice, Usage, usage_from
from mlx_gateway.supervisor.engine.requests import CompletionRequest
from mlx_gateway.supervisor.engine.sampling import check_common, sampling_params
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.keepalive import keepalive_for
from mlx_gateway.supervisor.reply.answer import json_answer
from mlx_gateway.supervisor.reply.loading import start_stream
from mlx_gateway.supervisor.reply.streaming import relay


def single_prompt(prompt: str | list[str | int | list[int]]) -> str | list[int]:
    """The one prompt of ``prompt``: a string or a list of token ids, possibly
    wrapped in a one-element list. Batches (several prompts) are a 400."""
    if isinstance(prompt, str):
        return prompt
    one: str | list[Any] = prompt
    if len(prompt) == 1 and isinstance(prompt[0], str | list):
        one = prompt[0]
        if isinstance(one, str):
            return one
    tokens = [token for token in one if isinstance(token, int)]
    if tokens and len(tokens) == len(one):
        return tokens
    raise BadRequest(
        "'prompt' must be a string or a list of token ids; "
        "several prompts in one request are not supported.",
        param="prompt",
    )


class CompletionEvents:
    """The ``text_completion`` events of one stream (no opening event)."""

    def __init__(
        self, id: str, created: int, model: str, include_usage: bool, echo: str = ""
    ) -> None:
        self.id, self.created, self.model = id, created, model
        self.include_usage = include_usage
        self.echo = echo
        self._content = sse.Template(
            Completion(
                id=id,
                created=created,
                model=model,
                choices=[CompletionChoice(index=0, text=sse.HOLE)],
                usage=None if include_usage else UNSET,
            )
        )

    def _chunk(self, text: str, finish_reason: str | None = None) -> bytes:
        return sse.data(
            Completion(
                id=self.id,
                created=self.created,
                model=self.model,
                choices=[CompletionChoice(index=0, text=text, finish_reason=finish_reason)],
                usage=None if self.include_usage else UNSET,
            )
        )

    def opening(self) -> bytes | None:
        return self._chunk(self.echo) if self.echo else None

    def content(self, text: str) -> bytes:
        return self._content.fill(text)

    def finish(self, finish_reason: str) -> bytes:
        return self._chunk("", finish_reason)

    def usage(self, usage: Usage) -> bytes:
        return sse.data(
            Completion(id=self.id, created=self.created, model=self.model, choices=[], usage=usage)
        )


async def create_completion(request: Request) -> Response:
    """Validate, resolve the model, generate; answer as JSON or as an SSE stream."""
    req = await read_json(request, CompletionRequest)
    check_common(req)
    prompt = single_prompt(req.prompt)
    if req.echo and not isinstance(prompt, str):
        raise BadRequest("'echo' is only supported with a text prompt.", param="echo")
    echo = prompt if req.echo and isinstance(prompt, str) else ""
    handle = request.app.state.registry.resolve(req.model)
    client_lifetime(request.app.state, handle, req.keep_alive, req.ttl)
    require_kind(handle, COMPLETION_KINDS, "/v1/completions")
    msg = Generate(
        request_id=recorder.name_request("cmpl-"),
        prompt=prompt,
        sampling=sampling_params(req, handle.config),
        adapters=adapters_for(handle, req.adapter),
    )
    created = int(time.time())
    if req.stream:
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        events = CompletionEvents(msg.request_id, created, handle.name, include_usage, echo)
        start = unless_disconnected(request, Generation.start(handle, msg))
        keepalive = keepalive_for(request.app.state)
        return await start_stream(handle, start, lambda g: relay(g, events), keepalive)
    generation = await unless_disconnected(request, Generation.start(handle, msg))

    async def answer(generation: Generation) -> Completion:
        try:
            text, done = await generation.collect()
        finally:
            await generation.aclose()
        choice = CompletionChoice(index=0, text=echo + text, finish_reason=done.finish_reason)
        return Completion(
            id=msg.request_id,
            created=created,
            model=handle.name,
            choices=[choice],
            usage=usage_from(done.usage),
        )

    async def again() -> Completion:
        return await answer(await Generation.start(handle, msg))

    interval = keepalive_for(request.app.state).interval
    return await json_answer(request, answer(generation), interval, again)
