"""One synthesis on a tts worker, from the text to the last byte of the file.

:meth:`Speech.start` holds the model's session and waits for the worker's first
audio, so a request that fails before any audio exists (an unknown voice, a model
that cannot load or produces nothing) is a plain HTTP error, never a 200 with an
empty body. After that the file's bytes are relayed as each sentence is
synthesized; a client that leaves closes the call, which cancels the work on the
worker at its next step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from mlx_gateway.protocol.messages import Done, SpeechChunk, Synthesize
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall, unwrap


class Speech:
    """A synthesis whose first audio arrived. Iterate :meth:`chunks` for the file's
    bytes; always :meth:`aclose` it."""

    def __init__(self, call: WorkerCall[Synthesize], first: SpeechChunk, data: bytes) -> None:
        self._call = call
        self._pending: list[tuple[SpeechChunk, bytes]] = [(first, data)]
        self.sample_rate = first.sample_rate
        self.seconds = 0.0
        """Seconds of audio received so far."""
        self.done: Done | None = None

    @classmethod
    async def start(cls, handle: ModelHandle, msg: Synthesize) -> Speech:
        """Send ``msg`` to ``handle``'s worker (waiting for the model) and wait for the
        first audio. Raises the request's error with nothing left open."""
        recorder.note_handle(handle)
        recorder.note_speech(len(msg.input), 0.0)
        call = WorkerCall(handle, msg, what="speech", code="incomplete_speech")
        item = await call.first(until=SpeechChunk)
        reply, payloads = unwrap(item)
        recorder.note_output(0)
        return cls(call, reply, payloads[0] if payloads else b"")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The file's bytes as they come (empty pieces skipped); ends after ``Done``."""
        while True:
            while self._pending:
                chunk, data = self._pending.pop(0)
                self.seconds += chunk.seconds
                recorder.note_speech(0, chunk.seconds)
                if data:
                    yield data
            reply, payloads = unwrap(await self._call.next())
            match reply:
                case SpeechChunk():
                    self._pending.append((reply, payloads[0] if payloads else b""))
                case Done(finish_reason=reason):
                    self.done = reply
                    recorder.note_done(reason, 0, 0)  # counted as characters and seconds
                    return

    async def aclose(self) -> None:
        """Leave the session (idempotent); cancels the work if it did not finish."""
        await self._call.aclose()
