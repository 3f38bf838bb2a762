"""The text tools: ``embed`` (the vectors as JSON text), ``rerank`` (the ranking as
JSON text) and ``ask`` (a language or vision model's answer), each through the core
its OpenAI route serves with."""

from __future__ import annotations

import json

from mcp_types import ContentBlock, TextContent
from msgspec import UNSET
from starlette.requests import Request

from mlx_gateway.supervisor.api.rerank.routes import ranking
from mlx_gateway.supervisor.api.rerank.schemas import RerankRequest
from mlx_gateway.supervisor.engine.ask import Ask, TextModel
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.turns import TextDelta, Turn
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.mcp_server.args import AskArgs, EmbedArgs, RerankArgs
from mlx_gateway.supervisor.reply.embed import (
    EmbedAsk,
    embed_for,
    floats,
    input_groups,
    split_rows,
    summary,
)
from mlx_gateway.supervisor.reply.priority import priority_of
from mlx_gateway.supervisor.reply.routed import choose, first_started
from mlx_gateway.supervisor.reply.serve import open_turn

ASK = "the MCP tool ask"
EMBED = "the MCP tool embed"


async def embed(request: Request, args: EmbedArgs, model: str) -> list[ContentBlock]:
    matrix = await embed_for(request, EmbedAsk(model=model, endpoint=EMBED, texts=args.texts))
    header, data = matrix.header, matrix.data
    if header.vectors:  # a multi-vector model: each input's summary vector
        vectors = [summary(group) for group in input_groups(header, data)]
    else:
        vectors = [floats(row) for row in split_rows(header, data)]
    return [TextContent(text=json.dumps(vectors))]


async def rerank(request: Request, args: RerankArgs, model: str) -> list[ContentBlock]:
    req = RerankRequest(
        model=model,
        query=args.query,
        documents=list(args.documents),
        top_n=args.top_n,
        return_documents=True,
    )
    ranked = await ranking(request, req)
    results = [
        {
            "index": result.index,
            "relevance_score": result.relevance_score,
            "document": result.document.text
            if result.document is not UNSET and result.document.text is not UNSET
            else args.documents[result.index],
        }
        for result in ranked.results
    ]
    return [TextContent(text=json.dumps(results))]


async def ask(request: Request, args: AskArgs, model: str) -> list[ContentBlock]:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.prompt})
    fields = SamplingFields(model=model, max_tokens=args.max_tokens)
    turn = Ask(model=model, endpoint=ASK, sampling=fields, messages=messages, id_prefix="mcp-")
    turn.priority = priority_of(request)
    gateway = gateway_of(request)
    caller = caller_of(request.scope)

    async def attempt(lm: TextModel, i: int) -> Turn:
        return await open_turn(gateway.mcp, lm, turn, caller)

    _, running = await first_started(choose(gateway.registry, turn), lambda m: m.name, attempt)
    try:
        text = "".join([e.text async for e in running.choice(0) if isinstance(e, TextDelta)])
    finally:
        await running.aclose()
    return [TextContent(text=text.strip())]
