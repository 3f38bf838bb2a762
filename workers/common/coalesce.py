"""Fewer, fuller ``Batch`` messages when generation steps come faster than anyone reads.

A generating backend makes one :class:`~mlx_gateway.protocol.messages.Chunk` per
request per step. Sent as they come, a small model on a fast machine produces a
message every millisecond or two, and the per-message work (ZeroMQ on both sides,
one SSE frame and one socket write per stream in the gateway) then costs a real
share of the CPU the model itself needs. :class:`Coalescer` holds the chunks of
successive steps and sends them together, at most one ``Batch`` per ``interval``:

* a request's first text goes out at once (time to first token is not delayed);
* everything held is sent before a request's ``Done`` or ``Error``;
* a step slower than ``interval`` (any real model under load) is sent as it comes,
  so only steps faster than the interval are ever merged;
* ``interval`` 0 sends every step's chunks at once.

Merged chunks keep every field: texts are joined, token counts added, log-probs
and tool calls kept in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mlx_gateway.protocol.messages import Batch, Chunk
from mlx_gateway.workers.common.options import seconds_option

DEFAULT_INTERVAL = 0.02
"""Seconds between two messages of one worker when its steps come faster (the
model's ``stream_interval``, which also spaces the gateway's SSE writes): 20 ms of
streamed text arrive together, below what a reader can see."""


def interval_option(options: Mapping[str, Any]) -> float:
    """The ``stream_interval`` of a worker's ``WorkerSpec.options``."""
    return seconds_option(options, "stream_interval", DEFAULT_INTERVAL)


class Coalescer:
    """Holds chunks for at most ``interval`` seconds; used on the MLX thread only."""

    def __init__(
        self,
        emit: Callable[[Batch], None],
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = max(interval, 0.0)
        self._emit = emit
        self._clock = clock
        self._held: dict[str, Chunk] = {}
        self._started: set[str] = set()
        """Requests whose first chunk went out."""
        self._due = 0.0
        self._urgent = False
        """A request's first text is held: send at once."""

    def add(self, chunks: Iterable[Chunk]) -> None:
        """Take one step's chunks; send what is held when it is due."""
        for chunk in chunks:
            held = self._held.get(chunk.request_id)
            if held is None:
                self._hold(chunk)
            else:
                held.text += chunk.text
                held.tokens += chunk.tokens
                if chunk.logprobs:
                    held.logprobs = [*held.logprobs, *chunk.logprobs]
                if chunk.tool_calls:
                    held.tool_calls = [*held.tool_calls, *chunk.tool_calls]
        self.send_if_due()

    def append(self, request_id: str, text: str, tokens: int) -> None:
        """Take a request's new text (no log-probs, no tool calls) without a chunk
        of its own: the per-token path of a plain request. Nothing is sent until
        :meth:`add` or :meth:`send_if_due` ends the step."""
        held = self._held.get(request_id)
        if held is None:
            self._hold(Chunk(request_id=request_id, text=text, tokens=tokens))
        else:
            held.text += text
            held.tokens += tokens

    def _hold(self, chunk: Chunk) -> None:
        self._held[chunk.request_id] = chunk
        if chunk.request_id not in self._started:
            self._started.add(chunk.request_id)
            self._urgent = True

    def send_if_due(self) -> None:
        """Send what is held if a request's first text is among it or the interval
        has passed."""
        if self._held and (self._urgent or self._clock() >= self._due):
            self.flush()

    def flush(self) -> None:
        """Send everything held now, as one ``Batch``."""
        self._urgent = False
        if not self._held:
            return
        chunks = list(self._held.values())
        self._held.clear()
        self._emit(Batch(chunks=chunks))
        self._due = self._clock() + self.interval

    def end(self, request_id: str) -> None:
        """A request is about to end (``Done`` or ``Error`` follows): send what is
        held, its chunks and everyone else's, so that nothing arrives after its end."""
        self.flush()
        self._started.discard(request_id)
