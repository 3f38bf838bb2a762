"""One transcription on a whisper worker, from the upload to the transcript.

Like :class:`~.generation.Generation`, the transcription's worker call (the model's
session, ``Cancel`` when left early) is opened in :meth:`Transcription.start` and
closed by :meth:`Transcription.aclose`, so it spans the audio's decoding on the
worker, which decides between an HTTP error and a result, and the streamed text
after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from mlx_gateway.protocol.messages import Chunk, Done, Started, Transcribe, Transcript
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall, unwrap


class Transcription:
    """A transcription the worker accepted (it decoded the audio and sent ``Started``).

    Iterate :meth:`deltas` for the text as it is transcribed, or await
    :meth:`result`; both raise :class:`~..errors.GatewayError` when the request
    fails on the worker. Always :meth:`aclose` it: leaving early cancels the work."""

    def __init__(self, call: WorkerCall[Transcribe]) -> None:
        self._call = call
        self.transcript: Transcript | None = None

    @classmethod
    async def start(cls, handle: ModelHandle, msg: Transcribe, audio: bytes) -> Transcription:
        """Enter ``handle``'s session (waiting for the model), send ``msg`` with the
        ``audio`` file as its payload and wait until the worker decoded it.

        Raises the request's error (400 undecodable audio, 503 model failed to
        load, …) with nothing left open."""
        recorder.note_handle(handle)
        frames = [audio]
        del audio
        call = WorkerCall(
            handle, msg, frames, what="transcription", code="incomplete_transcription"
        )
        await call.first(until=Started)
        # Sent and decoded: the gateway keeps no copy of the file while it waits
        # for the transcript (the call holds this list until it ends).
        frames.clear()
        return cls(call)

    async def deltas(self) -> AsyncIterator[str]:
        """The text of each transcribed window; ends after the final ``Done``, with
        :attr:`transcript` set."""
        while True:
            reply, _ = unwrap(await self._call.next())
            match reply:
                case Chunk(text=text) if text:
                    yield text
                case Transcript():
                    self.transcript = reply
                    recorder.note_audio(reply.duration)
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
        await self._call.aclose()
