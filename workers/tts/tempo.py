"""Change the speed of speech without changing its pitch: FFmpeg's ``atempo``.

For models whose ``generate`` has no speed setting, the request's ``speed`` (0.25
to 4, as OpenAI's) is applied to the synthesized samples by PyAV's filter graph;
the pitch stays, as when a person speaks faster. ``atempo`` takes factors from
0.5 to 2 per filter, so a speed outside that is a chain of them.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np


def factors(speed: float) -> list[float]:
    """``speed`` as a product of factors within ``atempo``'s 0.5 to 2."""
    out: list[float] = []
    while speed > 2.0:
        out.append(2.0)
        speed /= 2.0
    while speed < 0.5:
        out.append(0.5)
        speed /= 0.5
    return [*out, speed]


class Tempo:
    """A stream of mono float32 samples at ``rate``, played ``speed`` times as fast."""

    def __init__(self, rate: int, speed: float) -> None:
        self.rate = rate
        self._graph = av.filter.Graph()
        node = self._graph.add_abuffer(
            format="flt", sample_rate=rate, layout="mono", time_base=Fraction(1, rate)
        )
        source = node
        for factor in factors(speed):
            tempo = self._graph.add("atempo", f"{factor:.6f}")
            node.link_to(tempo)
            node = tempo
        sink = self._graph.add("abuffersink")
        node.link_to(sink)
        self._graph.configure()
        self._source = source
        self._pts = 0

    def feed(self, samples: np.ndarray) -> np.ndarray:
        """Take ``samples``; the sped-up samples ready now (filters work in blocks)."""
        block = np.ascontiguousarray(samples.astype(np.float32, copy=False).reshape(1, -1))
        frame = av.AudioFrame.from_ndarray(block, format="flt", layout="mono")
        frame.sample_rate = self.rate
        frame.time_base = Fraction(1, self.rate)
        frame.pts = self._pts
        self._pts += block.shape[1]
        self._graph.push(frame)
        return self._drain()

    def flush(self) -> np.ndarray:
        """The samples the filters still hold, at the end of the speech."""
        self._graph.push(None)
        return self._drain()

    def _drain(self) -> np.ndarray:
        blocks = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, av.EOFError):
                break
            blocks.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)
