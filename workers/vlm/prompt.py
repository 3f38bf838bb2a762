"""A vlm request's prompt: its messages, images and audio → the prompt tokens and
the input embeddings mlx-vlm's batch takes.

The chat template (with a system-turn and tool-prompt fallback for templates that
lack them) renders the messages, the model's processor expands the image and video
tokens and makes the pixels and audio features (videos: :mod:`.video`, their
frames as a video where the processor takes one, else as ordered images), and the
vision tower and token embedding run at once, so a failure is this request's error
(400), not a failed batch step. The prefix cache's salt (images, videos and audio
change it) is set here too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_vlm import apc
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.utils import prepare_inputs, should_add_special_tokens
from mlx_vlm.vision_cache import VisionFeatureCache, processed_image_key
from PIL import Image

from mlx_gateway.protocol.messages import IMAGE_PART, VIDEO_PART, CountTokens, Generate, Tokenize
from mlx_gateway.workers.common import system_turns
from mlx_gateway.workers.common.tokenize import text_tokens
from mlx_gateway.workers.common.tool_prompt import probe_tool_prompt
from mlx_gateway.workers.runtime.contract import RequestError
from mlx_gateway.workers.vlm.audio_input import decode_input_audio, sampling_rate, takes_audio
from mlx_gateway.workers.vlm.images import DETAILS, ImageLimits, decode_image, image_payload
from mlx_gateway.workers.vlm.video import Video, VideoLimits, decode_video
from mlx_gateway.workers.vlm.video_template import (
    has_video_parts,
    processor_handles_video,
    render_with_videos,
)

log = logging.getLogger(__name__)

DEFAULT_VIDEO = VideoLimits()
VISION_CACHE_SIZE = 16
"""Encoded images kept for models whose mlx-vlm code reuses them (Gemma 4, Qwen 3.5…)."""
_TEXT_PARTS = ("text", "input_text")
_RESERVED_TEMPLATE_KWARGS = {
    "processor",
    "config",
    "prompt",
    "add_generation_prompt",
    "return_messages",
    "num_images",
    "num_audios",
    "tokenize",
}


@dataclass
class Prompt:
    """A request's prompt, ready for the batch: token ids and the keyword arguments
    mlx-vlm's batch takes for it (input embeddings, position ids…)."""

    tokens: list[int]
    kwargs: dict[str, Any]
    where: str
    """The request field the prompt came from (``messages`` or ``prompt``)."""


class Prompts:
    """Builds the prompts of one loaded model (see module doc). Runs MLX work: call
    it on the MLX thread, in the generation stream."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        name: str,
        limits: ImageLimits,
        prefix_cache: apc.APCManager | None,
        video: VideoLimits = DEFAULT_VIDEO,
    ) -> None:
        self.model = model
        self.processor = processor
        self.name = name
        self.limits = limits
        self.video = video
        self.native_video = processor_handles_video(processor)
        """Whether videos reach the processor as videos (else as ordered images)."""
        self.prefix_cache = prefix_cache
        self._vision_cache = VisionFeatureCache(max_size=VISION_CACHE_SIZE)
        self.tool_prompt = probe_tool_prompt(self.render, name)
        """Whether the chat template renders tools (see :mod:`.tool_prompt`)."""

    def prompt(self, request: Generate, payloads: Sequence[bytes]) -> Prompt:
        """Template, images and tokens → the prompt with its input embeddings."""
        raw, where, has_images, has_media = self.inputs(request, payloads)
        tokens = raw["input_ids"].squeeze(0).tolist()
        kwargs = self.embed(raw, has_images, has_media=has_media)
        return Prompt(tokens=tokens, kwargs=kwargs, where=where)

    def inputs(
        self, request: Generate, payloads: Sequence[bytes]
    ) -> tuple[dict[str, Any], str, bool, bool]:
        """The processor's output for the request (token ids with the image tokens
        expanded, pixels…), the field it came from, and whether it has images and
        other media (audio, videos). The vision tower does not run here."""
        images: list[Image.Image] = []
        audio: list[Any] = []
        videos: list[Video] = []
        if request.messages is not None:
            messages = self.template_messages(request, payloads, images, audio, videos)
            text = self.apply_template(
                messages, len(images), request.chat_template_kwargs, audios=len(audio)
            )
            raw = self.processed(text, images, audio, videos)
            where = "messages"
        elif isinstance(request.prompt, str):
            raw = self.processed(request.prompt, [])
            where = "prompt"
        elif isinstance(request.prompt, list):
            vocab = len(self.processor.tokenizer)
            bad = next((t for t in request.prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(
                    f"token id {bad} in the prompt is outside the vocabulary (0..{vocab - 1})",
                    param="prompt",
                )
            raw = {"input_ids": mx.array([request.prompt])}
            where = "prompt"
        else:
            raise RequestError("either messages or prompt is required", param="messages")
        if raw["input_ids"].size == 0:
            raise RequestError(f"the {where} is empty", param=where)
        return raw, where, bool(images), bool(audio) or bool(videos)

    def count(self, request: CountTokens | Tokenize, payloads: Sequence[bytes]) -> list[int]:
        """The prompt tokens a ``Generate`` of the same messages (or text) would have."""
        if isinstance(request, Tokenize) and request.messages is None:
            return text_tokens(self.processor.tokenizer, request)
        as_generate = Generate(
            request_id=request.request_id,
            messages=request.messages,
            prompt=request.prompt if isinstance(request, CountTokens) else None,
            chat_template_kwargs=request.chat_template_kwargs,
            images=request.images if isinstance(request, CountTokens) else [],
        )
        raw, _, _, _ = self.inputs(as_generate, payloads)
        return [int(t) for t in raw["input_ids"].squeeze(0).tolist()]

    def template_messages(
        self,
        request: Generate,
        payloads: Sequence[bytes],
        images: list[Image.Image],
        audio: list[Any],
        videos: list[Video] | None = None,
    ) -> list[dict[str, Any]]:
        """The messages as mlx-vlm's templates take them; decodes each image part's
        payload into ``images``, each audio part's into ``audio`` and each video
        part's into ``videos`` (or, for a processor without video, its frames into
        ``images``), in order. Audio parts leave the messages: mlx-vlm's templates
        put the audio markers at the end of the last user message (``num_audios``)."""
        assert request.messages is not None
        videos = [] if videos is None else videos
        image_parts = 0
        out: list[dict[str, Any]] = []
        for i, message in enumerate(request.messages):
            content = message.get("content")
            if not isinstance(content, list):
                out.append({**message, "content": "" if content is None else content})
                continue
            parts: list[dict[str, Any]] = []
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                where = f"messages[{i}].content[{j}]"
                if kind in _TEXT_PARTS:
                    parts.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == IMAGE_PART:
                    payload = image_payload(request, payloads, image_parts, where)
                    image_parts += 1
                    detail = str(part.get("detail") or "auto")
                    if detail not in DETAILS:
                        raise RequestError(
                            f"detail must be one of {', '.join(DETAILS)}, not '{detail}'",
                            param=f"{where}.image_url.detail",
                        )
                    images.append(
                        decode_image(
                            payload, where=f"{where}.image_url", detail=detail, limits=self.limits
                        )
                    )
                    parts.append({"type": IMAGE_PART})
                elif kind == "audio":
                    audio.append(self._audio(part, payloads, where, len(audio)))
                elif kind == VIDEO_PART:
                    parts += self._video(part, payloads, where, images, videos)
                else:
                    raise RequestError(
                        f"content parts of type '{kind}' are not supported by this model",
                        param=f"{where}.type",
                    )
            out.append({**message, "content": parts})
        if image_parts != len(request.images):
            raise RequestError(
                f"the request names {len(request.images)} image payload(s) but its messages "
                f"have {image_parts} image part(s)",
                param="messages",
            )
        return out

    def _video(
        self,
        part: dict[str, Any],
        payloads: Sequence[bytes],
        where: str,
        images: list[Image.Image],
        videos: list[Video],
    ) -> list[dict[str, Any]]:
        """The template parts of a video part: one video part (its frames joining
        ``videos``) or, for a processor without video, one image part per frame
        (joining ``images``)."""
        frame = part.get("payload")
        if not isinstance(frame, int) or not 0 <= frame < len(payloads):
            raise RequestError(f"{where}: video payload {frame} is missing", param=where)
        video = decode_video(payloads[frame], where=f"{where}.video_url", limits=self.video)
        if self.native_video:
            videos.append(video)
            return [{"type": VIDEO_PART}]
        images += [Image.fromarray(frame) for frame in video.frames]
        return [{"type": IMAGE_PART} for _ in video.frames]

    def _audio(self, part: dict[str, Any], payloads: Sequence[bytes], where: str, k: int) -> Any:
        """The samples of an audio part; a 400 naming the model when it takes no audio."""
        name = self.name
        if not takes_audio(self.model):
            raise RequestError(
                f"The model '{name}' does not accept audio; send input_audio parts to a "
                "vision model with an audio encoder (an omni model such as Gemma 3n), or "
                "transcribe the audio first with /v1/audio/transcriptions.",
                param=f"{where}.input_audio",
                code="audio_not_supported",
            )
        if k >= 1 and not getattr(self.processor, "supports_multiple_audio", False):
            raise RequestError(
                f"The model '{name}' takes one audio clip per request; this one has more.",
                param=f"{where}.input_audio",
                code="too_many_audio_clips",
            )
        frame = part.get("payload")
        if not isinstance(frame, int) or not 0 <= frame < len(payloads):
            raise RequestError(f"{where}: audio payload {frame} is missing", param=where)
        rate = sampling_rate(self.processor)
        return decode_input_audio(payloads[frame], where=f"{where}.input_audio", rate=rate)

    def apply_template(
        self,
        messages: list[dict[str, Any]],
        images: int,
        kwargs: dict[str, Any],
        audios: int = 0,
    ) -> str:
        extra = {k: v for k, v in kwargs.items() if k not in _RESERVED_TEMPLATE_KWARGS}
        if self.tool_prompt.fallback and extra.get("tools"):
            tools = extra.pop("tools")
            messages = self.tool_prompt.messages(
                messages, tools if isinstance(tools, list) else [tools]
            )

        def render(conversation: list[dict[str, Any]]) -> str:
            text = self.render(conversation, num_images=images, num_audios=audios, **extra)
            return text if isinstance(text, str) else ""

        messages = system_turns.for_template(messages, render)
        try:
            text = self.render(messages, num_images=images, num_audios=audios, **extra)
        except Exception as exc:
            # Jinja templates reject conversations with raise_exception(…): a client error.
            raise RequestError(
                f"the chat template rejected the messages: {exc}", param="messages"
            ) from None
        if not isinstance(text, str):  # a few model types return the message itself
            raise RequestError(
                f"model type '{self.model.config.model_type}' has no text chat template",
                param="messages",
            )
        return text

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """mlx-vlm's chat template (with the generation prompt) applied to ``messages``
        (video parts kept in place, see :mod:`.video_template`)."""
        if has_video_parts(messages):
            return render_with_videos(self.processor, self.model.config, messages, **kwargs)
        return apply_chat_template(self.processor, self.model.config, messages, **kwargs)

    def processed(
        self,
        text: str,
        images: list[Image.Image],
        audio: list[Any] | None = None,
        videos: list[Video] | None = None,
    ) -> dict[str, Any]:
        """The processor's output: token ids, pixels when there are images or videos,
        audio features when there is audio."""
        config = self.model.config
        extra: dict[str, Any] = {}
        if videos:
            extra["videos"] = [video.channels_first() for video in videos]
            extra["video_metadata"] = [
                {
                    "total_num_frames": len(video.frames),
                    "fps": video.fps,
                    "frames_indices": list(range(len(video.frames))),
                    "duration": video.duration,
                }
                for video in videos
            ]
        try:
            return prepare_inputs(
                self.processor,
                images=images or None,
                audio=audio or None,
                prompts=text,
                **extra,
                image_token_index=getattr(config, "image_token_index", None),
                add_special_tokens=should_add_special_tokens(config.model_type, self.processor),
            )
        except Exception as exc:  # e.g. a processor that takes one image per prompt
            raise RequestError(
                f"the model's processor rejected the input: {exc}", param="messages"
            ) from None

    def embed(
        self, raw: dict[str, Any], has_images: bool, *, has_media: bool = False
    ) -> dict[str, Any]:
        """Run the vision tower and the token embedding now, so a failure is this
        request's error, not a failed batch step."""
        input_ids = raw["input_ids"]
        pixel_values = raw.get("pixel_values")
        data = {
            k: v for k, v in raw.items() if k not in ("input_ids", "pixel_values", "attention_mask")
        }
        cache_args: dict[str, Any] = {}
        if has_images and pixel_values is not None:
            cache_args = {
                "vision_cache": self._vision_cache,
                "_image_key": processed_image_key(pixel_values, **data),
            }
        embedded = self.model.get_input_embeddings(
            input_ids, pixel_values, mask=raw.get("attention_mask"), **data, **cache_args
        )
        kwargs = {**data, **{k: v for k, v in embedded.to_dict().items() if v is not None}}
        mx.eval([v for v in kwargs.values() if isinstance(v, mx.array)])
        if self.prefix_cache is not None:
            # The cache keys blocks by their tokens plus this salt; images, audio and
            # videos (the processor's features: their markers are the same for every
            # clip) change it.
            image_hash = apc.hash_image_payload(pixel_values=pixel_values) if has_images else 0
            media = (
                {k: v for k, v in data.items() if isinstance(v, mx.array)} if has_media else None
            )
            kwargs["_apc_semantic_hash"] = apc.semantic_extra_hash(
                image_hash=image_hash,
                media=media,
                model=self.model.language_model,
                processor=self.processor,
            )
        return kwargs
