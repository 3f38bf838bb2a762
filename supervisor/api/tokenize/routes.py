"""``POST /tokenize`` and ``POST /detokenize``: a model's own tokenizer, in the shape
llama-server answers (``tokens``, with ``with_pieces`` each token's ``piece``;
``content``), with vLLM's fields too (``prompt``, ``messages``, ``count``,
``max_model_len``).

The worker of the model tokenizes (starting it when it is not running): the gateway
never reads tokenizers or chat templates itself, so counts are exactly the
worker's, chat templates, tools and images included.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import uuid4

from msgspec import Meta, Struct
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import Detokenize, Done, Tokenize, Tokens
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.kinds import TOKENIZE_KINDS, require_kind
from mlx_gateway.supervisor.engine.requests import Message, messages_to_builtins
from mlx_gateway.supervisor.errors import BadRequest, ModelUnavailable
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall
from mlx_gateway.supervisor.reply.inputs import prepare_images

TokenId = Annotated[int, Meta(ge=0, le=2**31 - 1)]


class TokenizeRequest(Struct, kw_only=True):
    """The body. ``model`` may be left out when the gateway serves one model."""

    model: str | None = None
    content: str | None = None
    prompt: str | None = None
    """vLLM's name for ``content``."""
    messages: list[Message] | None = None
    """vLLM: a chat conversation, rendered with the model's chat template."""
    add_special: bool | None = None
    add_special_tokens: bool | None = None
    """vLLM's name for ``add_special`` (default true there, false in llama-server)."""
    with_pieces: bool = False
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(Struct, kw_only=True):
    model: str | None = None
    tokens: list[TokenId]


def _handle(request: Request, model: str | None, endpoint: str) -> ModelHandle:
    registry = gateway_of(request).registry
    if model is None:
        names = registry.served_names()
        if len(names) != 1:
            raise BadRequest(
                f"'model' is required when the gateway serves several models; served "
                f"models: {', '.join(names)}.",
                param="model",
            )
        model = names[0]
    handle: ModelHandle = registry.resolve(model)
    require_kind(handle, TOKENIZE_KINDS, endpoint)
    return handle


async def tokenize(request: Request) -> Response:
    """``POST /tokenize``."""
    req = await read_json(request, TokenizeRequest)
    handle = _handle(request, req.model, "/tokenize")
    text = req.content if req.content is not None else req.prompt
    if (text is None) == (req.messages is None):
        raise BadRequest("Send either 'content' (or 'prompt') or 'messages'.", param="content")
    msg = Tokenize(
        request_id=f"tok-{uuid4().hex}",
        text=text,
        add_special=bool(
            req.add_special if req.add_special is not None else req.add_special_tokens
        ),
        with_pieces=req.with_pieces,
    )
    if req.messages is not None:
        inputs = await prepare_images(
            request, handle, for_template(messages_to_builtins(req.messages))
        )
        if inputs.files:
            raise BadRequest(
                "/tokenize takes text messages; count a conversation with images with "
                "/v1/chat/completions/input_tokens.",
                param="messages",
            )
        kwargs = dict(req.chat_template_kwargs or {})
        if req.tools:
            kwargs["tools"] = req.tools
        msg.messages = inputs.messages
        msg.chat_template_kwargs = kwargs
    reply = await unless_disconnected(request, _call(handle, msg))
    tokens: list[Any] = list(reply.tokens)
    if req.with_pieces:
        tokens = [{"id": t, "piece": p} for t, p in zip(reply.tokens, reply.pieces, strict=False)]
    facts = handle.facts
    return JSONResponse(
        {
            "tokens": tokens,
            "count": len(reply.tokens),
            "max_model_len": facts.context_length if facts is not None else None,
            "model": handle.name,
        }
    )


async def detokenize(request: Request) -> Response:
    """``POST /detokenize``."""
    req = await read_json(request, DetokenizeRequest)
    handle = _handle(request, req.model, "/detokenize")
    msg = Detokenize(request_id=f"detok-{uuid4().hex}", tokens=req.tokens)
    reply = await unless_disconnected(request, _call(handle, msg))
    return JSONResponse({"content": reply.text, "prompt": reply.text, "model": handle.name})


async def _call(handle: ModelHandle, msg: Tokenize | Detokenize) -> Tokens:
    result: Tokens | None = None
    async with WorkerCall(handle, msg) as call:
        async for reply in call:
            if isinstance(reply, Tokens):
                result = reply
            elif isinstance(reply, Done) and result is not None:
                return result
    raise ModelUnavailable(
        "The worker ended the request without tokens.", code="incomplete_generation"
    )
