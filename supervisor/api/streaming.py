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
    ``[DONE]``. A failure ends the stream with an error event and ``[DONE]``."""
    try:
        opening = fmt.opening()
        if opening is not None:
            yield opening
        async for reply in generation:
            if isinstance(reply, Done):
                yield fmt.finish(reply.finish_reason)
                if fmt.include_usage:
                    yield fmt.usage(usage_from(reply.usage))
                break
            if reply.text:
                yield fmt.content(reply.text)
    except GatewayError as exc:
        logger.warning("stream failed after it started: %s", exc.message)
        yield error_event(exc)
    except Exception:
        logger.exception("stream failed after it started")
        yield error_event(GatewayError("The server had an error while streaming the response."))
    finally:
        await generation.aclose()
    yield sse.DONE
