"""Cutting an assistant's audio item where playback stopped.

The model reads the assistant's audio as its transcript, so a truncated item keeps
the text of what the user heard: every sentence whose audio ended by
``audio_end_ms``, and of the sentence playing then the share of its characters
that its played share of audio stands for (cut back to a word).
"""

from __future__ import annotations

from mlx_gateway.supervisor.api.realtime.conversation import Item
from mlx_gateway.supervisor.errors import BadRequest


def truncate_audio(item: Item, audio_end_ms: int) -> None:
    part = item.content[0] if item.content else None
    if (
        item.type != "message"
        or item.role != "assistant"
        or part is None
        or part.type != "output_audio"
    ):
        raise BadRequest(
            "Only an assistant message's audio can be truncated.",
            param="item_id",
            code="invalid_value",
        )
    total = item.audio_ms[-1] if item.audio_ms else 0
    if audio_end_ms > total and item.status == "completed":
        raise BadRequest(
            f"Audio content of {total}ms is shorter than {audio_end_ms}ms.",
            param="audio_end_ms",
            code="invalid_value",
        )
    kept: list[str] = []
    start = 0
    for sentence, end in zip(item.sentences, item.audio_ms, strict=True):
        if end <= audio_end_ms:
            kept.append(sentence)
        else:
            share = (audio_end_ms - start) / max(1, end - start)
            cut = sentence[: int(len(sentence) * share)]
            if " " in cut:
                cut = cut[: cut.rindex(" ")]
            kept.append(cut)
            break
        start = end
    part.text = " ".join(s for s in kept if s).strip()
    item.sentences = kept
    item.audio_ms = [min(ms, audio_end_ms) for ms in item.audio_ms[: len(kept)]]
