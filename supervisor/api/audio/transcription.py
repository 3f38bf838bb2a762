"""One transcription on a whisper worker, from the upload to the transcript.

Like :class:`~.generation.Generation`, the model's session (in-flight accounting,
``Cancel`` when left early) is entered in :meth:`Transcription.start` and held
until :meth:`Transcription.aclose`, so it spans the audio's decoding on the worker,
which decides between an HTTP error and a result, and the streamed text after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

from mlx_gateway.protocol.messages import Chunk, Done, Started, Transcribe, Transcript
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.http import recorder
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.relay import WithPayloads


class Transcription:
    """A transcription the worker accepted (it decoded the audio and sent ``Started``).

    Iterate :meth:`deltas` for the text as it is transcribed, or await
    :meth:`result`; both raise :class:`~..errors.GatewayError` when the request
    fails on the worker. Always :meth:`aclose` it: leaving early cancels the work."""

    def __init__(self, stack: contextlib.AsyncExitStack, replies: AsyncIterator[Any]) -> None:
        self._stack = stack
        self._replies = replies
        self.transcript: Transcript | None = None
        self._closed = False

    @classmethod
    async def start(cls, handle: ModelHandle, msg: Transcribe, audio: bytes) -> Transcription:
        """Enter ``handle``'s session (waiting for the model), send ``msg`` with the
        ``audio`` file as its payload and wait until the worker decoded it.

        Raises the request's error (400 undecodable audio, 503 model failed to
        load, …) with nothing left open."""
        recorder.note_handle(handle)
        stack = contextlib.AsyncExitStack()
        try:
            session = await stack.enter_async_context(handle.session())
            frames = [audio]
            del audio
            replies = session.call(msg, msg.request_id, frames)
            stack.push_async_callback(replies.aclose)
            while not isinstance(await _next(replies), Started):
                pass
            # Sent and decoded: the gateway keeps no copy of the file while it waits
            # for the transcript (the call holds this list until it ends).
            frames.clear()
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return cls(stack, replies)

    async def deltas(self) -> AsyncIterator[str]:
        """The text of each transcribed window; ends after the final ``Done``, with
        :attr:`transcript` set."""
        while True:
            reply = await _next(self._replies)
            match reply:
                case Chunk(text=text) if text:
                    yield text
                case Transcript():
                    self.transcript = reply
                case Done():
                    if self.transcript is None:
                        raise ModelUnavailable(
                            "The worker ended the transcription without a result.",
                            code="incomplete_transcription",
                        )
                    return

    async def result(self) -> Transcript:
        """Run to the end; the worker's :class:`Transcript`."""
        async for _ in self.deltas():
            pass
        assert self.transcript is not None
        return self.transcript

    async def aclose(self) -> None:
        """Leave the session (idempotent); cancels the work if it did not finish.
        Shielded, so that it completes inside a cancelled task too."""
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()


async def _next(replies: AsyncIterator[Any]) -> Any:
    try:
        reply = await anext(replies)
    except StopAsyncIteration:
        raise ModelUnavailable(
            "The worker ended the transcription without a result.",
            code="incomplete_transcription",
        ) from None
    return reply.reply if isinstance(reply, WithPayloads) else reply
