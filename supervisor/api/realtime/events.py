"""The client's events as the session reads them: one msgspec union tagged on ``type``.

A text frame is decoded straight into its event's Struct (:func:`decode`); fields the
gateway does not read are ignored, as the SDKs send more than it uses. The session
object of ``session.update`` is written one way by GA clients and another by beta
ones (``OpenAI-Beta: realtime=v1``): the union is built for the connection's dialect
(:class:`GaSession` or :class:`BetaSession`). Several fields take more than one form
(a format as ``"pcm16"`` or ``{"type": "audio/pcm"}``, a voice as a name or ``{"id"}``).

A field of the wrong type is an :class:`~...errors.BadRequest` naming its path
(``session.audio.input.turn_detection.eagerness``); values are checked where they
are used (:mod:`.settings`, :mod:`.conversation`), which words their errors.
"""

from __future__ import annotations

from typing import Generic, TypeVar, get_args

import msgspec
from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import validation_error

JsonObject = dict[str, object]
"""A JSON object the gateway hands on as it came (a tool's schema, metadata)."""

# ---------------------------------------------------------------- session fields


class FormatFields(Struct):
    """An audio format in the GA form, ``{"type": "audio/pcm", "rate": 24000}``."""

    type: str = "audio/pcm"
    rate: float | UnsetType = UNSET


AudioFormatField = str | FormatFields
"""A format as either dialect writes it: ``"pcm16"`` or :class:`FormatFields`."""


class VoiceId(Struct):
    """A voice as ``{"id": "alloy"}`` (GA)."""

    id: str | None = None


VoiceField = str | VoiceId | None


class VadFields(Struct):
    """``turn_detection``: ``server_vad`` or ``semantic_vad``."""

    type: str | None = "server_vad"
    threshold: float | None = None
    prefix_padding_ms: int | None = None
    silence_duration_ms: int | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None
    eagerness: str | None = None


class TranscriptionFields(Struct):
    """``input_audio_transcription`` (beta) / ``audio.input.transcription`` (GA)."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class ToolFields(Struct):
    type: str = "function"
    name: str | None = None
    parameters: JsonObject | None = None
    """Its JSON schema, handed on as it came."""
    description: str | None = None


class ToolChoiceFields(Struct):
    """``{"type": "function", "name": …}``."""

    name: str | None = None


ToolChoiceField = str | ToolChoiceFields
MaxTokensField = int | str | None
"""An integer, or ``"inf"``."""


class SessionFields(Struct, kw_only=True):
    """The fields both dialects' session objects share; ``UNSET``: not sent."""

    instructions: str | UnsetType | None = UNSET
    tools: list[ToolFields] | UnsetType = UNSET
    tool_choice: ToolChoiceField | UnsetType = UNSET
    temperature: float | UnsetType | None = UNSET


class BetaSession(SessionFields, kw_only=True):
    """The beta interface's flat session."""

    modalities: list[str] | UnsetType = UNSET
    voice: VoiceField | UnsetType = UNSET
    input_audio_format: AudioFormatField | None = None
    output_audio_format: AudioFormatField | None = None
    input_audio_transcription: TranscriptionFields | UnsetType | None = UNSET
    turn_detection: VadFields | UnsetType | None = UNSET
    max_response_output_tokens: MaxTokensField | UnsetType = UNSET
    speed: float | UnsetType = UNSET


class AudioInput(Struct):
    format: AudioFormatField | None = None
    transcription: TranscriptionFields | UnsetType | None = UNSET
    turn_detection: VadFields | UnsetType | None = UNSET


class AudioOutput(Struct):
    format: AudioFormatField | None = None
    voice: VoiceField | UnsetType = UNSET
    speed: float | UnsetType = UNSET


class AudioFields(Struct):
    input: AudioInput | None = None
    output: AudioOutput | None = None


class GaSession(SessionFields, kw_only=True):
    """The GA interface's session: its audio under ``audio.input`` / ``audio.output``."""

    type: str | None = None
    output_modalities: list[str] | UnsetType = UNSET
    max_output_tokens: MaxTokensField | UnsetType = UNSET
    audio: AudioFields | None = None


# ---------------------------------------------------------------- items


class PartFields(Struct):
    """A content part, in either dialect's names (``input_text``, ``text``, …)."""

    type: str = ""
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None
    """Base64 audio of an ``input_audio`` part."""


class ItemFields(Struct):
    """An item of ``conversation.item.create`` or of ``response.create``'s ``input``
    (where ``{"type": "item_reference", "id": …}`` names one of the conversation)."""

    id: str | None = None
    type: str = "message"
    role: str | None = None
    content: list[PartFields] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str = "{}"
    output: str | None = None


class ResponseFields(Struct):
    """``response.create``'s ``response``: the session's settings for this response."""

    instructions: str | None = None
    modalities: list[str] | UnsetType = UNSET
    output_modalities: list[str] | UnsetType = UNSET
    voice: VoiceField | UnsetType = UNSET
    tools: list[ToolFields] | UnsetType = UNSET
    tool_choice: ToolChoiceField | UnsetType = UNSET
    max_output_tokens: MaxTokensField | UnsetType = UNSET
    max_response_output_tokens: MaxTokensField | UnsetType = UNSET
    temperature: float | UnsetType | None = UNSET
    conversation: str | None = None
    """``"none"``: an out-of-band response."""
    input: list[ItemFields] | None = None
    metadata: JsonObject | None = None


# ---------------------------------------------------------------- events

S = TypeVar("S", GaSession, BetaSession)


class ClientEvent(Struct, tag_field="type", kw_only=True):
    event_id: str | None = None

    @property
    def type(self) -> str:
        """The event's ``type``."""
        tag = type(self).__struct_config__.tag
        assert isinstance(tag, str)
        return tag


class SessionUpdate(ClientEvent, Generic[S], tag="session.update"):
    session: S | None = None


class TranscriptionSessionUpdate(SessionUpdate[S], Generic[S], tag="transcription_session.update"):
    pass


class AudioAppend(ClientEvent, tag="input_audio_buffer.append"):
    audio: str


class AudioCommit(ClientEvent, tag="input_audio_buffer.commit"):
    pass


class AudioClear(ClientEvent, tag="input_audio_buffer.clear"):
    pass


class ItemCreate(ClientEvent, tag="conversation.item.create"):
    item: ItemFields
    previous_item_id: str | None = None


class ItemDelete(ClientEvent, tag="conversation.item.delete"):
    item_id: str | None = None


class ItemRetrieve(ClientEvent, tag="conversation.item.retrieve"):
    item_id: str | None = None


class ItemTruncate(ClientEvent, tag="conversation.item.truncate"):
    audio_end_ms: int
    item_id: str | None = None
    content_index: int = 0


class ResponseCreate(ClientEvent, tag="response.create"):
    response: ResponseFields | None = None


class ResponseCancel(ClientEvent, tag="response.cancel"):
    response_id: str | None = None


class OutputAudioClear(ClientEvent, tag="output_audio_buffer.clear"):
    """WebRTC's and SIP's: refused over a WebSocket."""


_Common = (
    AudioAppend
    | AudioCommit
    | AudioClear
    | ItemCreate
    | ItemDelete
    | ItemRetrieve
    | ItemTruncate
    | ResponseCreate
    | ResponseCancel
    | OutputAudioClear
)
GaEvent = SessionUpdate[GaSession] | TranscriptionSessionUpdate[GaSession] | _Common
BetaEvent = SessionUpdate[BetaSession] | TranscriptionSessionUpdate[BetaSession] | _Common
TYPES = sorted(
    ["session.update", "transcription_session.update"]
    + [str(kind.__struct_config__.tag) for kind in get_args(_Common)]
)
"""Every event type the gateway reads."""


class _Envelope(Struct):
    """What an event that does not decode still says of itself."""

    type: object = None
    event_id: object = None


_DECODERS = {False: msgspec.json.Decoder(GaEvent), True: msgspec.json.Decoder(BetaEvent)}


class BadEvent(BadRequest):
    """An event refused before it was read; ``event_id`` is its own, to echo."""

    def __init__(self, error: BadRequest, event_id: str | None) -> None:
        super().__init__(error.message, param=error.param, code=error.code)
        self.event_id = event_id


Event = GaEvent | BetaEvent


def decode(text: str, beta: bool) -> Event:
    """The event of a text frame (``beta``: the beta dialect's session object)."""
    try:
        event: Event = _DECODERS[beta].decode(text)
        return event
    except msgspec.ValidationError as exc:  # (a DecodeError too: first)
        error = _refused(exc)
    except msgspec.DecodeError:
        raise BadRequest("The event is not valid JSON.", code="invalid_json") from None
    try:
        envelope = msgspec.json.decode(text, type=_Envelope)
    except msgspec.ValidationError:
        raise BadRequest("An event is a JSON object.", code="invalid_event") from None
    event_id = envelope.event_id if isinstance(envelope.event_id, str) else None
    if envelope.type not in TYPES:
        error = BadRequest(
            f"Invalid value: {envelope.type!r}. Supported values are: {', '.join(TYPES)}.",
            param="type",
            code="invalid_value",
        )
    raise BadEvent(error, event_id)


T = TypeVar("T", bound=Struct)


def converted(data: object, kind: type[T], param: str) -> T:
    """``data`` (a session object as Python values) as ``kind``; a field of the wrong
    type is a :class:`BadRequest` naming its path under ``param``."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise _refused(exc, param) from None


def _refused(exc: msgspec.ValidationError, under: str = "") -> BadRequest:
    """msgspec's complaint as the API's error, its ``param`` the field's path (under
    ``under``); a value of the wrong type is ``invalid_type``."""
    error = validation_error(str(exc))
    inner = error.param or ""
    path = ".".join(p for p in (under, inner) if p) or None
    message = error.message.replace(f"'{inner}'", f"'{path}'") if inner else error.message
    if "Expected `" not in message:
        return BadRequest(message, param=path)
    message = message.replace("Invalid value for", "Invalid type for", 1)
    return BadRequest(message, param=path, code="invalid_type")
