"""How long each stage of a spoken answer took, from the end of the user's turn.

The clock starts when the turn ends for the gateway: the VAD's ``speech_stopped``
or the client's ``input_audio_buffer.commit``. Each later mark is that turn's time
to the stage, in milliseconds, logged once per response that spoke
(``realtime latency …`` on ``mlx_gateway.realtime``):

* ``vad``: input audio the VAD heard after the speech ended before it decided (its
  ``silence_duration_ms`` and the last chunk's remainder; 0 after a commit);
* ``transcribed``: the turn's transcript is there (the whisper worker's run);
* ``first_token``: the lm's first text (the prefill and one step);
* ``first_sentence``: the first sentence is complete and goes to the tts worker;
* ``first_audio``: its first audio goes out to the client.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

log = logging.getLogger("mlx_gateway.realtime")

STAGES = ("transcribed", "first_token", "first_sentence", "first_audio")


@dataclass
class TurnClock:
    """The marks of one turn's answer (monotonic seconds)."""

    turn_end: float | None = None
    """When the turn ended (``None``: the response answers no audio turn)."""
    vad_ms: int = 0
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, stage: str) -> None:
        """The stage is reached now (the first time counts)."""
        self.marks.setdefault(stage, time.monotonic())

    def since_turn_end(self) -> dict[str, int]:
        """Milliseconds from the end of the turn to each stage reached."""
        if self.turn_end is None:
            return {}
        start = self.turn_end
        return {s: round((self.marks[s] - start) * 1000) for s in STAGES if s in self.marks}

    def report(self, response_id: str) -> None:
        figures = self.since_turn_end()
        if "first_audio" not in figures:
            return
        stages = " ".join(f"{stage}={ms}ms" for stage, ms in figures.items())
        log.info("realtime latency %s: vad=%dms %s", response_id, self.vad_ms, stages)
