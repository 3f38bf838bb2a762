"""Relay a generation as OpenAI stream events, whatever the endpoint's chunk shape."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from mlx_gateway.protocol.messages import Chunk, Done
from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.engine.objects import Usage, usage_from
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.replies import error_event

logger = logging.getLogger(__name__)


class EventFormat(Protocol):
    """An endpoint's stream chunks, each already framed as an SSE event."""

    include_usage: bool

    def opening(self) -> bytes | None:
        """The event sent before any content, if the endpoint has one."""

    def content(self, text: str) -> bytes: ...

    def finish(self, finish_reason: str) -> bytes: ...

    def usage(self, usage: Usage) -> bytes: ...


async def relay(generation: Generation, fmt: EventFormat) -> AsyncIterator[bytes]:
    """The events of ``generation``: opening, content, finish, usage (if asked),
    ``[DONE]``. A failure ends the stream with an error event and ``[DONE]``.

    Each write carries everything there is: the text of every chunk that arrived
    meanwhile goes out as one content event, and the last content, the finish, the
    usage and ``[DONE]`` leave together. After a content write the next one waits
    until ``generation.stream_interval`` has passed (the first content goes out at
    once), so at many tokens per second a stream costs one write per interval
    instead of one per generation step."""
    loop = asyncio.get_running_loop()
    interval = generation.stream_interval
    next_write = 0.0
    tail = b""
    try:
        opening = fmt.opening()
        if opening is not None:
            yield opening
        async for reply in generation:
            done = reply if isinstance(reply, Done) else None
            texts = [reply.text] if isinstance(reply, Chunk) else []
            if done is None:
                wait = next_write - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                done = _gather(generation, texts)
            text = "".join(texts)
            event = fmt.content(text) if text else b""
            if done is None:
                if event:
                    yield event
                    next_write = loop.time() + interval
                continue
            tail = event + fmt.finish(done.finish_reason)
            if fmt.include_usage:
                tail += fmt.usage(usage_from(done.usage))
            break
    except GatewayError as exc:
        logger.warning("stream failed after it started: %s", exc.message)
        tail = error_event(exc)
    except Exception:
        logger.exception("stream failed after it started")
        tail = error_event(GatewayError("The server had an error while streaming the response."))
    finally:
        await generation.aclose()
    yield tail + sse.DONE


def _gather(generation: Generation, texts: list[str]) -> Done | None:
    """Append the texts of the chunks that already arrived; the ``Done`` if it did."""
    for reply in generation.ready():
        if isinstance(reply, Done):
            return reply
        texts.append(reply.text)
    return None
