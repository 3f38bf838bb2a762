"""``POST /v1/completions`` (legacy text completions)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from msgspec import UNSET
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.engine.objects import Completion, CompletionChoice, Usage, usage_from
from mlx_gateway.supervisor.engine.requests import CompletionRequest, check_common
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import read_json, sse
from mlx_gateway.supervisor.reply.serve import (
    COMPLETION_KINDS,
    Ask,
    Reply,
    TextModel,
    Turn,
    relay,
    serve,
)


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
    """Validate, then answer as JSON or as an SSE stream."""
    req = await read_json(request, CompletionRequest)
    check_common(req)
    prompt = single_prompt(req.prompt)
    if req.echo and not isinstance(prompt, str):
        raise BadRequest("'echo' is only supported with a text prompt.", param="echo")
    ask = Ask(
        model=req.model,
        endpoint="/v1/completions",
        id_prefix="cmpl-",
        sampling=req,
        prompt=prompt,
        kinds=COMPLETION_KINDS,
        keep_alive=req.keep_alive,
        ttl=req.ttl,
        adapter=req.adapter,
    )
    echo = prompt if req.echo and isinstance(prompt, str) else ""
    return await serve(request, ask, CompletionReply(req, echo), stream=req.stream)


class CompletionReply(Reply):
    """A raw generation as ``text_completion`` events or one ``text_completion``."""

    def __init__(self, req: CompletionRequest, echo: str) -> None:
        self.id = ""
        self.created = int(time.time())
        self.include_usage = req.stream_options is not None and req.stream_options.include_usage
        self.echo = echo

    def begin(self, model: TextModel, request_id: str) -> None:
        self.id = request_id

    def events(self, running: Turn) -> AsyncIterator[bytes]:
        name = running.handle.name
        events = CompletionEvents(self.id, self.created, name, self.include_usage, self.echo)
        return relay(running.generations[0], events)

    async def whole(self, running: Turn) -> Any:
        try:
            text, done = await running.generations[0].collect()
        finally:
            await running.aclose()
        choice = CompletionChoice(index=0, text=self.echo + text, finish_reason=done.finish_reason)
        return Completion(
            id=self.id,
            created=self.created,
            model=running.handle.name,
            choices=[choice],
            usage=usage_from(done.usage),
        )
