"""Relay a generation as OpenAI stream events, whatever the endpoint's chunk shape."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

from ...protocol.messages import Done
from ..errors import GatewayError
from . import sse
from .generation import Generation
from .objects import Usage, usage_from
from .responses import error_event

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

    Each wake-up writes once: the text of every chunk that arrived meanwhile goes
    out as one content event (a stream that fell behind catches up in one write,
    not one per generation step), and the last content, the finish, the usage and
    ``[DONE]`` leave together."""
    tail = b""
    try:
        opening = fmt.opening()
        if opening is not None:
            yield opening
        async for reply in generation:
            done = reply if isinstance(reply, Done) else None
            texts = [] if done is not None else [reply.text]
            if done is None:
                for more in generation.ready():
                    if isinstance(more, Done):
                        done = more
                    else:
                        texts.append(more.text)
            text = "".join(texts)
            event = fmt.content(text) if text else b""
            if done is None:
                if event:
                    yield event
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
