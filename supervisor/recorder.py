"""What each request did, for ``/metrics`` and its usage row: its model, first
token, tokens, audio, images, outcome.

The observing middleware (:mod:`.observe`) opens a :class:`RequestRecord` per HTTP
request in a context variable; the shared request code (:mod:`.generation`, and
any endpoint's own work loop) notes facts on it with the ``note_*`` functions,
which do nothing outside a request. When the response ends, the middleware
commits the record into the app's :class:`Recorder`, which counts it and hands
its :class:`UsageRow` to the usage database (:mod:`.usage`, written off the
request path). A context variable reaches every task the request starts (anyio
and asyncio copy the context into them), so no handler needs to pass the record
around.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlx_gateway.supervisor.metrics import Counter, Histogram
from mlx_gateway.supervisor.usage.rows import UsageRow, kind_of_route
from mlx_gateway.supervisor.usage.store import UsageStore

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
logger = logging.getLogger(__name__)

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass
class RequestRecord:
    """One HTTP request as seen by the gateway (times are ``time.monotonic()``)."""

    started: float
    id: str = ""
    """Its ``X-Request-Id`` (the chat completion's or message's id where it has one)."""
    path: str = ""
    client: str = ""
    """The client's address (``host:port``)."""
    phase: str = "queued"
    """``queued`` (for a slot or the load), ``prefill d/t``, ``decode n`` (see
    :mod:`.requests_live` for ``loading``)."""
    task: asyncio.Task[object] | None = None
    """The task answering it: cancelling it ends the request as a client's
    disconnect would."""
    aborts: list[Callable[[BaseException], bool]] = field(default_factory=list)
    """Its worker calls' ``abort``: end them with an error the client sees in its
    API's shape (see :func:`note_abort`)."""
    model: str | None = None
    first_token: float | None = None
    key: str = "anonymous"
    """The name of the app whose key made the request (:func:`..http.caller.caller_of`)."""
    prompt_tokens: int = 0
    """Input tokens of every turn (a turn's ``n`` choices count their prompt once)."""
    cached_tokens: int = 0
    """Of those, read from the prompt cache."""
    completion_tokens: int = 0
    earlier: tuple[int, int] = (0, 0)
    """The prompt and cached tokens of the turns before the current one (a tool
    loop's earlier rounds)."""
    images: int = 0
    """Pictures made (finished, not previews)."""
    status: int = 200
    """The answer's status where no HTTP response carries it (a Realtime response)."""
    draft_proposed: int = 0
    draft_accepted: int = 0
    """A draft model's proposals for this request and those taken (speculative decoding)."""
    characters: int = 0
    """Text-to-speech: characters of input."""
    audio_seconds: float = 0.0
    """Seconds of audio: synthesized (text to speech) or heard (transcription)."""
    cache_checked: bool = False
    """A text turn whose parts were compared with the model's recent prompts."""
    cache_miss: CacheMiss | None = None
    """Where its prompt left the recent prompt it shared the most with (see
    :mod:`.engine.prompt_parts`)."""
    left_out: int = 0
    """Images in tool results left out for a text-only model (each a note instead)."""
    outcome: str | None = None
    """How the model's work ended: a finish reason (``stop``, ``length``…),
    ``error`` (failed after it started) or ``client_left``."""
    route: str | None = None
    """The route it counts under where that is not its HTTP route (an MCP tool
    call's: ``mcp <tool>``)."""


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "mlx_gateway_request_record", default=None
)


def open_record(
    path: str = "", client: str = ""
) -> tuple[RequestRecord, contextvars.Token[RequestRecord | None]]:
    record = RequestRecord(time.monotonic(), f"req-{uuid.uuid4().hex}", path, client)
    try:
        record.task = asyncio.current_task()
    except RuntimeError:  # no running loop
        record.task = None
    return record, _current.set(record)


def name_request(prefix: str) -> str:
    """A new id for the request's object (``chatcmpl-…``, ``msg_…``), which becomes
    its ``X-Request-Id`` too (when named before the response starts)."""
    name = f"{prefix}{uuid.uuid4().hex}"
    record = _current.get()
    if record is not None:
        record.id = name
    return name


def close_record(token: contextvars.Token[RequestRecord | None]) -> None:
    _current.reset(token)


def current() -> RequestRecord | None:
    return _current.get()


def tokens_used() -> int:
    """The prompt and output tokens the current request noted (0 outside one): what
    it is charged against its app's token limits."""
    record = _current.get()
    return record.prompt_tokens + record.completion_tokens if record is not None else 0


def note_model(name: str) -> None:
    """The request is served by model ``name`` (its served name)."""
    record = _current.get()
    if record is not None:
        record.model = name


if TYPE_CHECKING:
    from mlx_gateway.supervisor.engine.prompt_parts import CacheMiss
    from mlx_gateway.supervisor.pool.model_handle import ModelHandle


def note_handle(handle: ModelHandle) -> None:
    """The request is served by ``handle``'s model."""
    note_model(handle.name)


def note_turn() -> None:
    """A new turn starts (a tool loop's next round): the prompt tokens counted so
    far stay, the turn's own are added as its choices report them."""
    record = _current.get()
    if record is not None:
        record.earlier = (record.prompt_tokens, record.cached_tokens)


def note_started(prompt_tokens: int) -> None:
    """The worker accepted the request (``Started``)."""
    record = _current.get()
    if record is not None:
        record.prompt_tokens = record.earlier[0] + prompt_tokens
        record.phase = f"prefill 0/{prompt_tokens}"


def note_cache_parts(miss: CacheMiss | None) -> None:
    """The turn's prompt was compared with the model's recent ones: ``miss`` says
    where it left the closest one (``None``: it extends it, or shares nothing)."""
    record = _current.get()
    if record is not None:
        record.cache_checked = True
        record.cache_miss = miss


def note_left_out(images: int) -> None:
    """``images`` tool-result images were left out: the model reads text only."""
    record = _current.get()
    if record is not None:
        record.left_out += images


def cache_note(record: RequestRecord) -> str:
    """What the log and ``/v1/requests`` say of a turn's prompt cache use."""
    said = f"{record.cached_tokens} of {record.prompt_tokens} prompt tokens from the cache"
    miss = record.cache_miss
    if miss is not None:
        where = f"in {miss.part}" if miss.part else "at its end"
        said += f"; left a cached prompt at token {record.cached_tokens}, {where}"
    return said


def note_abort(abort: Callable[[BaseException], bool]) -> None:
    """A worker call of the request that an admin's cancel may end with an error."""
    record = _current.get()
    if record is not None:
        record.aborts.append(abort)


def note_prefilled(done: int, total: int) -> None:
    """The worker's ``Prefilled``: ``done`` of ``total`` prompt tokens read."""
    record = _current.get()
    if record is not None:
        record.phase = f"prefill {done}/{total}"


def note_output(tokens: int) -> None:
    """The worker produced output (a ``Chunk``); the first one stamps the TTFT."""
    record = _current.get()
    if record is not None:
        if record.first_token is None:
            record.first_token = time.monotonic()
        record.completion_tokens += tokens
        record.phase = f"decode {record.completion_tokens}"


def note_speech(characters: int, seconds: float) -> None:
    """Text-to-speech: ``characters`` of input taken, ``seconds`` of audio made."""
    record = _current.get()
    if record is not None:
        record.characters += characters
        record.audio_seconds += seconds


def note_audio(seconds: float) -> None:
    """Speech to text: ``seconds`` of audio heard."""
    record = _current.get()
    if record is not None:
        record.audio_seconds += seconds


def note_images(count: int) -> None:
    """``count`` pictures made."""
    record = _current.get()
    if record is not None:
        record.images += count


def note_done(
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    draft_proposed: int = 0,
    draft_accepted: int = 0,
    *,
    cached_tokens: int = 0,
    streamed: int | None = None,
) -> None:
    """The worker's ``Done``: its usage is the answer's, as the client gets it.

    The turn's prompt (and cached) tokens are counted once whatever its ``n``, on
    top of the earlier turns' (:func:`note_turn`); completion tokens add up over
    choices and turns. ``streamed``: the tokens this generation's chunks already
    added (:func:`note_output`), replaced by the ``Done``'s count; ``None``: its
    chunks were not noted, its count replaces the request's."""
    record = _current.get()
    if record is not None:
        record.outcome = finish_reason
        earlier_prompt, earlier_cached = record.earlier
        if prompt_tokens:
            record.prompt_tokens = earlier_prompt + prompt_tokens
            record.cached_tokens = earlier_cached + cached_tokens
        if streamed is None:
            if prompt_tokens or completion_tokens:
                record.completion_tokens = completion_tokens
        else:
            record.completion_tokens += completion_tokens - streamed
        record.draft_proposed += draft_proposed
        record.draft_accepted += draft_accepted


def note_outcome(outcome: str) -> None:
    """How the work ended when no ``Done`` came (``error``, ``client_left``);
    the first outcome noted stays."""
    record = _current.get()
    if record is not None and record.outcome is None:
        record.outcome = outcome


class Recorder:
    """The gateway's request metrics, fed by finished :class:`RequestRecord`\\ s."""

    def __init__(self) -> None:
        self.http_requests = Counter(
            "mlx_gateway_http_requests_total",
            "HTTP requests answered, by route and status code.",
            ("route", "status"),
        )
        self.requests = Counter(
            "mlx_gateway_requests_total",
            "Requests for a model, by HTTP status code.",
            ("model", "status"),
        )
        self.outcomes = Counter(
            "mlx_gateway_request_outcomes_total",
            "How a model's work for a request ended: its finish reason (stop, length, "
            "cancelled), error (failed after it started) or client_left.",
            ("model", "outcome"),
        )
        self.prompt_tokens = Counter(
            "mlx_gateway_prompt_tokens_total", "Prompt (input) tokens processed.", ("model",)
        )
        self.completion_tokens = Counter(
            "mlx_gateway_completion_tokens_total",
            "Completion (output) tokens generated.",
            ("model",),
        )
        self.draft_tokens = Counter(
            "mlx_gateway_draft_tokens_total",
            "Tokens a draft model proposed (speculative decoding), by outcome: accepted "
            "(the model took them) or rejected.",
            ("model", "outcome"),
        )
        self.tts_characters = Counter(
            "mlx_gateway_tts_characters_total",
            "Text-to-speech: characters of input taken.",
            ("model",),
        )
        self.tts_audio_seconds = Counter(
            "mlx_gateway_tts_audio_seconds_total",
            "Text-to-speech: seconds of audio synthesized (and sent, as far as the client stayed).",
            ("model",),
        )
        self.key_requests = Counter(
            "mlx_gateway_key_requests_total",
            "Requests for a model, by app (the key's name), kind of request and HTTP status.",
            ("key", "model", "kind", "status"),
        )
        self.key_input_tokens = Counter(
            "mlx_gateway_key_input_tokens_total",
            "Input (prompt) tokens, by app and model.",
            ("key", "model"),
        )
        self.key_output_tokens = Counter(
            "mlx_gateway_key_output_tokens_total",
            "Output (completion) tokens, by app and model.",
            ("key", "model"),
        )
        self.ttft = Histogram(
            "mlx_gateway_time_to_first_token_seconds",
            "From the request's arrival to the worker's first output (model load included).",
            TTFT_BUCKETS,
            ("model",),
        )
        self.duration = Histogram(
            "mlx_gateway_request_duration_seconds",
            "From the request's arrival to the end of its response (streams included).",
            DURATION_BUCKETS,
            ("model",),
        )
        self.in_flight = 0
        """HTTP requests being served now (streams included)."""
        self.live: dict[int, RequestRecord] = {}
        """Those requests' records (``GET /v1/requests``), by ``id()``."""
        self.usage: UsageStore | None = None
        """The usage database: where each answered request's :class:`UsageRow`
        goes, read by ``/v1/usage`` (set by the app's lifespan; ``None``: usage is
        not kept)."""

    def commit(self, record: RequestRecord, route: str, status: int, ended: float) -> None:
        code = str(status)
        if record.cache_checked and record.prompt_tokens:
            said = cache_note(record)
            if record.left_out:
                said += f"; {record.left_out} tool-result image(s) left out (text-only model)"
            logger.info("%s %s on %s: %s", record.id, route, record.model, said)
        self.http_requests.inc(route, code)
        model = record.model
        if model is None:
            return
        self.requests.inc(model, code)
        if record.outcome is not None:
            self.outcomes.inc(model, record.outcome)
        if record.prompt_tokens:
            self.prompt_tokens.inc(model, amount=record.prompt_tokens)
        if record.completion_tokens:
            self.completion_tokens.inc(model, amount=record.completion_tokens)
        if record.draft_proposed:
            self.draft_tokens.inc(model, "accepted", amount=record.draft_accepted)
            rejected = record.draft_proposed - record.draft_accepted
            self.draft_tokens.inc(model, "rejected", amount=rejected)
        if record.characters:
            self.tts_characters.inc(model, amount=record.characters)
        if record.audio_seconds:
            self.tts_audio_seconds.inc(model, amount=record.audio_seconds)
        if record.first_token is not None:
            self.ttft.observe(model, value=record.first_token - record.started)
        self.duration.observe(model, value=ended - record.started)
        kind = kind_of_route(route)
        self.key_requests.inc(record.key, model, kind, code)
        if record.prompt_tokens:
            self.key_input_tokens.inc(record.key, model, amount=record.prompt_tokens)
        if record.completion_tokens:
            self.key_output_tokens.inc(record.key, model, amount=record.completion_tokens)
        if self.usage is not None:
            self.usage.add(usage_row(record, kind, status, ended - record.started))

    def families(self) -> list[Counter | Histogram]:
        return [
            self.http_requests,
            self.requests,
            self.outcomes,
            self.prompt_tokens,
            self.completion_tokens,
            self.draft_tokens,
            self.tts_characters,
            self.tts_audio_seconds,
            self.key_requests,
            self.key_input_tokens,
            self.key_output_tokens,
            self.ttft,
            self.duration,
        ]

    @contextlib.contextmanager
    def recording(self, route: str, key: str) -> Iterator[RequestRecord]:
        """A record for work that is no HTTP request (a Realtime response), committed
        with its ``status`` when the block ends."""
        record, token = open_record(route)
        record.key = key
        try:
            yield record
        finally:
            close_record(token)
            self.commit(record, route, record.status, time.monotonic())


def usage_row(record: RequestRecord, kind: str, status: int, duration: float) -> UsageRow:
    """What ``record``'s request used, as a usage row ending now."""
    return UsageRow(
        at=time.time(),
        key=record.key,
        model=record.model or "",
        kind=kind,
        input_tokens=record.prompt_tokens,
        cached_tokens=record.cached_tokens,
        output_tokens=record.completion_tokens,
        audio_seconds=round(record.audio_seconds, 3),
        images=record.images,
        duration=round(duration, 3),
        status=status,
        outcome=record.outcome,
    )
