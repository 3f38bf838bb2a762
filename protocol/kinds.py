"""The one table of worker kinds, read by the gateway and by the workers.

A *kind* is a family of models served by one worker package
(``mlx_gateway.workers.<kind>``): its backend library, the pip extra that installs
it, the API surfaces its models serve, how its memory need is estimated, and the
``model_type`` names a config may give it. Adding a kind is one row here plus its
worker package; no other module spells a list of kinds (``tests/test_layers.py``
checks that).

Pure data: no I/O, no imports beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MB = 1000**2
GB = 1000**3

# API surfaces (what a kind's models answer); the gateway's routes name these.
CHAT = "chat"
"""/v1/chat/completions, /v1/responses, /v1/messages"""
COMPLETIONS = "completions"
"""/v1/completions"""
EMBEDDINGS = "embeddings"
"""/v1/embeddings"""
TRANSCRIPTION = "transcription"
"""/v1/audio/transcriptions and /v1/audio/translations"""
SPEECH = "speech"
"""/v1/audio/speech and /v1/audio/voices"""
IMAGES = "images"
"""/v1/images/generations and /v1/images/edits"""
CONSTRAINED = "constrained"
"""grammar-constrained decoding (json_schema, forced tool calls)"""
ADAPTERS = "adapters"
"""LoRA adapters mounted beside the weights"""
IMAGE_INPUT = "image_input"
"""images (and audio) inside chat messages"""
PROGRESS = "progress"
"""per-step progress of long requests shown in /v1/models"""
RERANK = "rerank"
"""/v1/rerank (and /rerank, /v2/rerank): query/document relevance scores"""
TOKENIZE = "tokenize"
"""/tokenize and /detokenize: the model's own tokenizer"""
BATCH_TOKENS = "batch_tokens"
"""inputs of concurrent requests share padded forward passes (``max_batch_tokens``)"""


@dataclass(frozen=True)
class Extra:
    """The pip extra of ``mlx-gateway`` that installs a kind's backend."""

    name: str
    backend: str
    """The backend library's distribution name (``mlx-lm``)."""
    modules: tuple[str, ...]
    """Top-level modules a worker of the kind imports (checked before importing)."""
    no_deps: str = ""
    """A requirement installed separately with ``--no-deps`` (its declared
    dependencies pull torch or CUDA MLX)."""

    def install_command(self) -> str:
        command = f"pip install 'mlx-gateway[{self.name}]'"
        if self.no_deps:
            command += f" && pip install --no-deps '{self.no_deps}'"
        return command


@dataclass(frozen=True)
class MemoryProfile:
    """What a worker of one kind holds besides its KV cache."""

    weight_factor: float
    """Resident bytes per byte of weights on disk."""
    runtime: int
    """Fixed bytes: interpreter, MLX, tokenizer/processor, libraries, buffers."""
    activations: int = 0
    """Fixed bytes of working memory while a request runs (an image's latents and
    VAE decode, an audio window's encoder pass)."""
    kv: bool = False
    """Whether requests grow a KV cache that the budget admits per request."""


@dataclass(frozen=True)
class Kind:
    name: str
    """The worker package (``mlx_gateway.workers.<name>``) and ``WorkerSpec.kind``."""
    model_types: tuple[str, ...]
    """``model_type`` values a config entry may give (the first is canonical)."""
    surfaces: frozenset[str]
    """What its models serve (the constants above)."""
    endpoints: str
    """Where its models are served, for a 400 that sends a client there."""
    memory: MemoryProfile
    extra: Extra
    batches: bool = False
    """Whether concurrent requests share forward passes in the worker."""
    title: str = ""
    """What its models are called in messages (``language`` → "language models")."""
    defaults: dict[str, object] = field(default_factory=dict)
    """``model_type``-independent defaults of the kind's entries (config keys)."""

    def serves(self, surface: str) -> bool:
        return surface in self.surfaces


def _extra(name: str, backend: str, *modules: str, no_deps: str = "") -> Extra:
    return Extra(name, backend, ("mlx", *modules), no_deps)


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            name="lm",
            title="language",
            model_types=("lm",),
            surfaces=frozenset({CHAT, COMPLETIONS, CONSTRAINED, ADAPTERS, TOKENIZE}),
            endpoints="/v1/chat/completions or /v1/completions",
            memory=MemoryProfile(1.0, 200 * MB, kv=True),
            extra=_extra("lm", "mlx-lm", "mlx_lm", "llguidance"),
            batches=True,
        ),
        Kind(
            name="vlm",
            title="vision",
            model_types=("vlm", "multimodal"),
            surfaces=frozenset({CHAT, COMPLETIONS, IMAGE_INPUT, TOKENIZE}),
            endpoints="/v1/chat/completions",
            # working buffers; the vision tower's pass for its pictures is per model
            # (supervisor/pool/vision_need.py)
            memory=MemoryProfile(1.0, 450 * MB, activations=100 * MB, kv=True),
            extra=_extra("vlm", "mlx-vlm", "mlx_vlm", "PIL"),
            batches=True,
        ),
        Kind(
            name="embeddings",
            title="embeddings",
            model_types=("embeddings",),
            surfaces=frozenset({EMBEDDINGS, TOKENIZE, BATCH_TOKENS}),
            endpoints="/v1/embeddings",
            memory=MemoryProfile(1.0, 200 * MB, activations=100 * MB),
            extra=_extra("embeddings", "mlx-embeddings", "mlx_embeddings", "numpy"),
            batches=True,
        ),
        Kind(
            name="rerank",
            title="rerank",
            model_types=("rerank",),
            surfaces=frozenset({RERANK, TOKENIZE, BATCH_TOKENS}),
            endpoints="/v1/rerank",
            memory=MemoryProfile(1.0, 250 * MB, activations=100 * MB),
            # cross-encoders run on mlx-embeddings' encoders, LM rerankers on mlx-lm
            extra=_extra("rerank", "mlx-embeddings", "mlx_embeddings", "mlx_lm", "numpy"),
            batches=True,
        ),
        Kind(
            name="whisper",
            title="speech-to-text",
            model_types=("whisper",),
            surfaces=frozenset({TRANSCRIPTION}),
            endpoints="/v1/audio/transcriptions or /v1/audio/translations",
            memory=MemoryProfile(1.0, 300 * MB, activations=400 * MB),
            extra=_extra(
                "whisper",
                "mlx-whisper",
                "mlx_whisper",
                "av",
                "numpy",
                no_deps="mlx-whisper>=0.4.3,<0.5",
            ),
        ),
        Kind(
            name="tts",
            title="text-to-speech",
            model_types=("tts",),
            surfaces=frozenset({SPEECH}),
            endpoints="/v1/audio/speech",
            # a language model and an audio decoder (Kokoro 82M … Qwen3-TTS 1.7B)
            memory=MemoryProfile(1.0, 400 * MB, activations=300 * MB),
            extra=_extra("tts", "mlx-audio", "mlx_audio", "av", "numpy"),
        ),
        Kind(
            name="image",
            title="image",
            model_types=("image-generation", "image-edit", "image"),
            surfaces=frozenset({IMAGES, PROGRESS}),
            endpoints="/v1/images/generations or /v1/images/edits",
            # 1024² latents + VAE
            memory=MemoryProfile(1.05, 500 * MB, activations=2 * GB),
            extra=_extra("image", "mflux", "mflux", "PIL", no_deps="mflux>=0.24,<0.25"),
        ),
    )
}
"""Every kind of worker, by name."""

DEFAULT_MEMORY = MemoryProfile(1.05, 300 * MB, activations=500 * MB)
"""The memory profile of a kind this table does not know (a newer worker's)."""

MODEL_TYPES: dict[str, str] = {
    model_type: kind.name for kind in KINDS.values() for model_type in kind.model_types
}
"""Every ``model_type`` a config may name, mapped to the worker kind that serves it."""


DEFAULT_MODEL_TYPE = next(iter(KINDS.values())).model_types[0]
"""The ``model_type`` of an entry that gives none (the table's first kind)."""


def describe_model_types(model_types: tuple[str, ...]) -> str:
    """``("lm", "vlm", "multimodal")`` → ``language and vision models (model_type lm,
    vlm, multimodal)``: the kinds of ``model_types`` by title, then the names."""
    titles: list[str] = []
    for model_type in model_types:
        kind = KINDS.get(MODEL_TYPES.get(model_type, ""))
        title = kind.title if kind is not None and kind.title else model_type
        if title not in titles:
            titles.append(title)
    joined = titles[-1] if len(titles) < 2 else f"{', '.join(titles[:-1])} and {titles[-1]}"
    return f"{joined} models (model_type {', '.join(model_types)})"


def kinds_serving(surface: str) -> tuple[str, ...]:
    """The kinds whose models serve ``surface``, in table order."""
    return tuple(name for name, kind in KINDS.items() if kind.serves(surface))


def kind_serves(kind: str, surface: str) -> bool:
    """Whether the kind named ``kind`` serves ``surface`` (False for an unknown kind)."""
    row = KINDS.get(kind)
    return row is not None and row.serves(surface)


def memory_profile(kind: str) -> MemoryProfile:
    row = KINDS.get(kind)
    return row.memory if row is not None else DEFAULT_MEMORY


def backend_module(kind: str) -> str:
    """The module of a kind's worker that defines ``create_backend()``."""
    return f"mlx_gateway.workers.{kind}.backend"
