"""Whisper's long-form transcription, one 30-second window per call.

This is the sequential algorithm ``mlx_whisper.transcribe`` runs in one blocking
loop, cut at window boundaries so that the worker's serve loop gets control back
after each window: it can stream the window's text, see a cancel, or give the next
window to another request. Each window is decoded by mlx-whisper itself
(``model.decode``); word timings come from its ``add_word_timestamps``.

Per window: decode (retrying at higher temperatures when the text is repetitive
or improbable), drop it if it is silence, cut the tokens into segments at pairs of
timestamp tokens, and move the window start (``seek``) to the end of the last
complete segment, so a sentence cut by the window's edge is decoded again whole
in the next window. The text so far is the next window's prompt, as in Whisper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_whisper.audio import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES, SAMPLE_RATE
from mlx_whisper.decoding import DecodingOptions, DecodingResult
from mlx_whisper.tokenizer import LANGUAGES, TO_LANGUAGE_CODE, Tokenizer, get_tokenizer
from mlx_whisper.whisper import Whisper

from mlx_gateway.workers.whisper.mel import LogMel

FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""Tried in turn when a request leaves the temperature at 0 (OpenAI's meaning of 0)."""
COMPRESSION_RATIO_LIMIT = 2.4
"""Above it the window's text repeats itself: decode again, hotter."""
LOGPROB_LIMIT = -1.0
"""Below this mean token log-probability the text is a guess: decode again."""
NO_SPEECH_LIMIT = 0.6
"""Above this no-speech probability (and with an improbable text) a window is silence."""
_HOP_SECONDS = HOP_LENGTH / SAMPLE_RATE


def language_code(model: Whisper, language: str | None) -> str | None:
    """The model's code for ``language`` (a code such as ``de`` or an English name
    such as ``German``); ``None`` to detect it. Raises ``ValueError`` with a
    sentence for the client."""
    if language is None or not language.strip():
        return None
    wanted = language.strip().lower()
    code = wanted if wanted in LANGUAGES else TO_LANGUAGE_CODE.get(wanted)
    if not model.is_multilingual:
        if code != "en":
            raise ValueError("this model transcribes English only; leave out language or use 'en'")
        return None
    known = tuple(LANGUAGES)[: model.num_languages]
    if code not in known:
        raise ValueError(f"unknown language {language!r}; use an ISO-639-1 code such as 'en'")
    return code


def language_name(code: str) -> str:
    """``english`` for ``en``: the OpenAI API reports languages by name."""
    return LANGUAGES.get(code, code)


@dataclass
class Options:
    """What a request asks of the transcription."""

    task: str = "transcribe"
    language: str | None = None
    """A code of the model's, or ``None`` to detect (multilingual models)."""
    prompt: str | None = None
    temperature: float = 0.0
    word_timestamps: bool = False


class Transcriber:
    """The state of one transcription between windows. Call :meth:`step` until
    :attr:`done`; then :attr:`segments` and :meth:`text` hold the result."""

    def __init__(self, model: Whisper, mel: LogMel, options: Options, dtype: mx.Dtype) -> None:
        self.model = model
        self.mel = mel
        self.options = options
        self.dtype = dtype
        language = options.language
        if model.is_multilingual and language is None:
            _, probs = model.detect_language(mel.opening().astype(dtype))
            language = max(probs, key=probs.get)
        self.language: str = language or "en"
        self.tokenizer: Tokenizer = get_tokenizer(
            model.is_multilingual,
            num_languages=model.num_languages,
            language=self.language,
            task=options.task,
        )
        self.seek = 0
        """The first mel frame of the next window."""
        self.segments: list[dict[str, Any]] = []
        self.text_tokens = 0
        self._tokens: list[int] = []
        if options.prompt and options.prompt.strip():
            self._tokens = self.tokenizer.encode(" " + options.prompt.strip())
        self._prompt_length = len(self._tokens)
        self._context_from = 0
        """Where the next window's prompt starts in ``_tokens``."""
        self._last_speech = 0.0

    @property
    def done(self) -> bool:
        return self.seek >= self.mel.frames

    def text(self) -> str:
        """The whole text so far (without the request's prompt)."""
        return self.tokenizer.decode(self._tokens[self._prompt_length :])

    # ------------------------------------------------------------ one window

    def step(self) -> list[dict[str, Any]]:
        """Transcribe the next window; returns the segments it completed (maybe none)."""
        tokenizer = self.tokenizer
        start_frame = self.seek
        size = min(N_FRAMES, self.mel.frames - start_frame)
        mel = self.mel.window(start_frame, size).astype(self.dtype)
        offset = start_frame * _HOP_SECONDS
        result = self._decode(mel)
        if self._silent(result):
            self.seek += size
            return []
        tokens = np.array(result.tokens, dtype=np.int64)
        stamp = tokens >= tokenizer.timestamp_begin
        # A lone timestamp last means the speech ended inside this window.
        finished = stamp[-2:].tolist() == [False, True]
        boundaries = (np.flatnonzero(stamp[:-1] & stamp[1:]) + 1).tolist()
        pieces: list[dict[str, Any]] = []
        if boundaries:
            cuts = [*boundaries, len(tokens)] if finished else boundaries
            begin = 0
            for cut in cuts:
                piece = tokens[begin:cut]
                pieces.append(
                    self._segment(
                        start_frame,
                        offset + self._stamp_seconds(piece[0]),
                        offset + self._stamp_seconds(piece[-1]),
                        piece,
                        result,
                    )
                )
                begin = cut
            if finished:
                self.seek += size
            else:
                # Resume at the last complete segment's end; the rest is decoded again.
                stride = N_FRAMES // self.model.dims.n_audio_ctx
                self.seek += int(tokens[begin - 1] - tokenizer.timestamp_begin) * stride
        else:
            duration = size * _HOP_SECONDS
            stamps = tokens[stamp]
            if stamps.size and stamps[-1] != tokenizer.timestamp_begin:
                duration = self._stamp_seconds(stamps[-1])
            pieces.append(self._segment(start_frame, offset, offset + duration, tokens, result))
            self.seek += size
        if self.options.word_timestamps:
            self._add_words(pieces, mel, size, offset, finished)
        return self._keep(pieces, result)

    def _decode(self, mel: mx.array) -> DecodingResult:
        options = self.options
        temperatures = (options.temperature,) if options.temperature > 0 else FALLBACK_TEMPERATURES
        result: DecodingResult | None = None
        for temperature in temperatures:
            result = self.model.decode(
                mel,
                DecodingOptions(
                    task=options.task,
                    language=self.language,
                    temperature=temperature,
                    prompt=self._tokens[self._context_from :],
                    fp16=self.dtype == mx.float16,
                ),
            )
            repetitive = result.compression_ratio > COMPRESSION_RATIO_LIMIT
            improbable = result.avg_logprob < LOGPROB_LIMIT
            if result.no_speech_prob > NO_SPEECH_LIMIT or not (repetitive or improbable):
                break
        assert result is not None
        return result

    @staticmethod
    def _silent(result: DecodingResult) -> bool:
        return result.no_speech_prob > NO_SPEECH_LIMIT and result.avg_logprob <= LOGPROB_LIMIT

    def _stamp_seconds(self, token: np.integer[Any] | int) -> float:
        precision = (N_FRAMES // self.model.dims.n_audio_ctx) * _HOP_SECONDS
        return float(int(token) - self.tokenizer.timestamp_begin) * precision

    def _segment(
        self, seek: int, start: float, end: float, tokens: np.ndarray, result: DecodingResult
    ) -> dict[str, Any]:
        ids = [int(t) for t in tokens]
        return {
            "seek": seek,
            "start": start,
            "end": end,
            "text": self.tokenizer.decode([t for t in ids if t < self.tokenizer.eot]),
            "tokens": ids,
            "temperature": float(result.temperature),
            "avg_logprob": float(result.avg_logprob),
            "compression_ratio": float(result.compression_ratio),
            "no_speech_prob": float(result.no_speech_prob),
        }

    def _add_words(
        self,
        pieces: list[dict[str, Any]],
        mel: mx.array,
        size: int,
        offset: float,
        finished: bool,
    ) -> None:
        # Imported here: word timings bring SciPy and Numba (~0.9 s), only for the
        # requests that ask for words (see runtime/packages.py).
        from mlx_whisper.timing import add_word_timestamps

        add_word_timestamps(
            segments=pieces,
            model=self.model,
            tokenizer=self.tokenizer,
            mel=mel,
            num_frames=size,
            last_speech_timestamp=self._last_speech,
        )
        if not pieces:
            return
        # The last word's end, or the last segment's when no word was aligned.
        last_word_end = next(
            (w["end"] for piece in reversed(pieces) for w in reversed(piece["words"])),
            pieces[-1]["end"],
        )
        if not finished and last_word_end > offset:
            # Word timings place the cut more precisely than the timestamp tokens.
            self.seek = round(last_word_end * FRAMES_PER_SECOND)
        self._last_speech = last_word_end

    def _keep(self, pieces: list[dict[str, Any]], result: DecodingResult) -> list[dict[str, Any]]:
        kept: list[dict[str, Any]] = []
        for piece in pieces:
            if piece["start"] == piece["end"] or not piece["text"].strip():
                # An empty or instantaneous segment keeps its place but says nothing.
                piece.update(text="", tokens=[])
                if "words" in piece:
                    piece["words"] = []
            piece["id"] = len(self.segments) + len(kept)
            kept.append(piece)
            self._tokens.extend(piece["tokens"])
            self.text_tokens += sum(1 for t in piece["tokens"] if t < self.tokenizer.eot)
        self.segments.extend(kept)
        if result.temperature > 0.5:
            # Text sampled that hot is a poor prompt for the next window.
            self._context_from = len(self._tokens)
        return kept
