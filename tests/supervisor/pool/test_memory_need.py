"""The memory need of real models, before they ever ran: config.example.yaml's
models (and Llama 3.1 8B) as folders in a Hugging Face cache, each with its real
``config.json`` and sparse weight files of its real size (no disk is used), under
the budgets of 16, 32 and 64 GB Macs. See docs/design.md ("The memory need")."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig, load_config, override_server
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.eviction import Newcomer, Resident, decide
from mlx_gateway.supervisor.pool.memory import KV_WORKING_TOKENS, estimate, format_size
from mlx_gateway.supervisor.pool.needs import NeedBook
from mlx_gateway.supervisor.pool.placement import refusals

REPO = Path(__file__).resolve().parents[3]
REAL = Path(__file__).parent.parent / "data" / "real_models"
GB = 1000**3
MB = 1000**2
log = logging.getLogger(__name__)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding every model of ``weights.json``: snapshots with
    the real ``config.json`` and sparse weight files of the real sizes."""
    cache = tmp_path / "hub"
    table = json.loads((REAL / "weights.json").read_text())
    for repo, entry in table.items():
        if repo.startswith("_"):
            continue
        snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
        snapshot.mkdir(parents=True)
        config = REAL / repo.replace("/", "--") / "config.json"
        if config.exists():
            shutil.copy(config, snapshot / "config.json")
        for name, size in entry["files"].items():
            path = snapshot / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                out.truncate(size)  # sparse: claims the size, uses no blocks
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def example(budget: str) -> GatewayConfig:
    return override_server(load_config(REPO / "config.example.yaml"), memory_budget=budget)


def entry(repo: str, **settings: Any) -> ModelConfig:
    return model_entry(model_path=repo, served_model_name=repo.split("/")[-1], **settings)


def needs_of(config: GatewayConfig) -> dict[str, int]:
    return {m.served_model_name: estimate(m).bytes for m in config.models}


def test_every_example_model_gets_a_working_set_estimate(hub: Path) -> None:
    config = example("64GB")
    lines = []
    for model in config.models:
        need = estimate(model)
        assert need.source == "estimated", model.served_model_name
        parts = ", ".join(f"{k} {format_size(v)}" for k, v in need.parts.items())
        lines.append(f"{model.served_model_name:24s} {format_size(need.bytes):>8s}  ({parts})")
    log.warning("estimated needs of config.example.yaml:\n%s", "\n".join(lines))
    needs = needs_of(config)
    # Weights dominate; the overhead is what a person expects of each kind.
    expected = {
        "qwen3-0.6b": (0.7, 1.2),
        "llama-3.2-1b": (1.0, 1.6),
        "qwen3-4b": (3.5, 4.4),  # with its Qwen3-0.6B draft model
        "qwen3-coder-30b": (17.5, 19.5),
        "gemma-3-1b": (0.8, 1.3),
        "qwen2-vl-2b": (2.3, 3.2),
        "qwen2.5-vl-3b": (3.2, 4.3),
        "all-minilm-l6-v2": (0.25, 0.4),
        "flux2-klein": (7.0, 8.5),
        "flux2-klein-edit": (10.8, 12.5),
        "qwen-image-edit": (33.0, 36.0),
        "whisper-large-v3-turbo": (2.1, 2.6),
        "kokoro": (0.8, 0.95),
    }
    assert set(needs) == set(expected)
    for name, (low, high) in expected.items():
        assert low * GB <= needs[name] <= high * GB, (name, format_size(needs[name]))


def test_an_8b_model_with_a_long_context_needs_its_weights_not_137_gb(hub: Path) -> None:
    llama = entry("mlx-community/Llama-3.1-8B-Instruct-4bit", max_concurrency=8)
    need = estimate(llama)
    per_token = 2 * 32 * 8 * 128 * 2  # layers, KV heads, head_dim, fp16: 128 KiB
    assert need.parts["kv"] == per_token * KV_WORKING_TOKENS  # not 8 x 131072 tokens
    assert need.parts["weights"] == int(8.030e9 * 0.5625)
    assert 5.0 * GB < need.bytes < 6.0 * GB, format_size(need.bytes)
    # A short context bounds the working set further: 2 slots of 1024 tokens.
    short = estimate(entry(llama.model_path, context_length=1024, max_concurrency=2))
    assert short.parts["kv"] == per_token * 2048


def test_a_draft_model_adds_its_weights_and_one_sequence_of_kv(hub: Path) -> None:
    main = "mlx-community/Llama-3.1-8B-Instruct-4bit"
    draft = "mlx-community/Llama-3.2-1B-Instruct-4bit"
    alone = estimate(entry(main))
    both = estimate(entry(main, draft_model_path=draft))
    small = estimate(entry(draft, max_concurrency=1))  # the draft as a model of its own
    assert both.parts["draft"] == small.parts["weights"] + small.parts["kv"]
    assert both.bytes == alone.bytes + both.parts["draft"]
    assert 0.6 * GB < both.parts["draft"] < 1.0 * GB, format_size(both.parts["draft"])
    # A draft not on this machine yet adds nothing until the worker measures it.
    assert estimate(entry(main, draft_model_path="org/not-here")).parts["draft"] == 0


def test_kv_quantization_and_max_kv_size_shrink_the_working_set(hub: Path) -> None:
    repo = "mlx-community/Qwen3-4B-4bit"
    plain = estimate(entry(repo)).parts["kv"]
    assert estimate(entry(repo, kv_bits=8)).parts["kv"] == pytest.approx(plain * 0.53, rel=0.01)
    assert estimate(entry(repo, kv_bits=4)).parts["kv"] == pytest.approx(plain * 0.28, rel=0.01)
    window = estimate(entry(repo, max_kv_size=256, max_concurrency=4)).parts["kv"]
    assert window == plain * 1024 // KV_WORKING_TOKENS


def test_sliding_window_layers_hold_only_their_window(hub: Path) -> None:
    gemma = estimate(entry("mlx-community/gemma-3-1b-it-qat-4bit", max_concurrency=1))
    per_layer = 2 * 1 * 256 * 2  # one KV head of 256
    # 26 layers, every 6th global (4 global, 22 sliding over 512 tokens).
    assert gemma.parts["kv"] == per_layer * (4 * KV_WORKING_TOKENS + 22 * 512)


@pytest.mark.parametrize(
    ("budget", "refused"),
    [
        ("16GB", ["qwen3-coder-30b", "qwen-image-edit"]),
        ("32GB", ["qwen-image-edit"]),
        ("64GB", []),
    ],
)
def test_the_example_launches_and_refuses_only_what_cannot_fit(
    hub: Path, budget: str, refused: list[str]
) -> None:
    config = example(budget)
    messages = refusals(config, NeedBook(hub / "needs.json"))
    names = [m.split("'")[1] for m in messages]
    assert names == refused
    for message in messages:
        assert f"more than server.memory_budget ({budget[:-2]}.0 GB)" in message
        assert "weights " in message and "503 insufficient_memory" in message
    # Everything else fits on its own, with room for the chat models beside it.
    chat = ["qwen3-4b", "llama-3.2-1b", "gemma-3-1b", "all-minilm-l6-v2"]
    needs = needs_of(config)
    assert sum(needs[n] for n in chat) < 0.45 * int(budget[:-2]) * GB


def resident(needs: dict[str, int], name: str, last_used: float, **kw: Any) -> Resident:
    return Resident(name, needs[name], idle=kw.pop("idle", True), last_used=last_used, **kw)


def test_eviction_order_on_a_16_gb_budget(hub: Path) -> None:
    needs = needs_of(example("16GB"))
    budget = 16 * GB
    everyday = [
        resident(needs, "qwen3-4b", 1.0),
        resident(needs, "llama-3.2-1b", 2.0),
        resident(needs, "whisper-large-v3-turbo", 3.0),
        resident(needs, "all-minilm-l6-v2", 4.0),
    ]
    editor = Newcomer("flux2-klein-edit", needs["flux2-klein-edit"])
    # The image editor needs more than is free: the least recently used goes first,
    # and only as much as it takes.
    assert decide(everyday, editor, budget).evict == ["qwen3-4b"]
    # The chat model is busy: the next least recently used idle ones go instead.
    busy_chat = [resident(needs, "qwen3-4b", 1.0, idle=False), *everyday[1:]]
    decision = decide(busy_chat, editor, budget)
    assert decision.evict == ["llama-3.2-1b", "whisper-large-v3-turbo"] and decision.fits
    # The 30B coder needs nearly all 16 GB… it cannot start at all (refused at launch).
    coder = Newcomer("qwen3-coder-30b", needs["qwen3-coder-30b"])
    assert coder.need > budget
    # On 32 GB it waits for the image models it cannot evict (one pinned, one busy)
    # and evicts nothing meanwhile: evicting the idle ones would not be enough.
    images = [
        resident(needs, "flux2-klein-edit", 0.5, pinned=True),
        resident(needs, "flux2-klein", 0.6, idle=False),
    ]
    decision = decide([*images, *everyday], coder, 32 * GB)
    assert decision.blockers == ["flux2-klein-edit", "flux2-klein"] and not decision.fits
    assert decide(everyday, coder, 32 * GB).evict == []  # 18 + 6 GB fit in 32


def test_a_model_not_downloaded_yet_is_unknown(hub: Path) -> None:
    need = estimate(entry("mlx-community/not-downloaded"))
    assert (need.bytes, need.source) == (0, "unknown")
    configured = estimate(entry("mlx-community/not-downloaded", memory_estimate="6GB"))
    assert (configured.bytes, configured.source) == (6 * GB, "configured")


def test_measured_needs_are_remembered_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "needs.json"
    model = entry("mlx-community/Qwen3-4B-4bit")
    book = NeedBook(path)
    assert book.remembered(model) == 0
    assert book.record(model, 3 * GB) == 3 * GB
    assert book.record(model, 2 * GB) == 3 * GB  # the largest seen is the need
    again = NeedBook(path)  # a new gateway
    assert again.remembered(model) == 3 * GB
    changed = msgspec.structs.replace(model, context_length=4096)
    assert again.remembered(changed) == 0  # other settings: estimate again
    path.write_text("not json")
    assert NeedBook(path).remembered(model) == 0  # a broken file is ignored


def test_a_vision_model_counts_its_tower_for_images_and_frames(hub: Path) -> None:
    repo = "mlx-community/Qwen2-VL-2B-Instruct-4bit"
    base = estimate(entry(repo, model_type="vlm", max_videos=1))  # 8 images, 16 frames
    longer = estimate(entry(repo, model_type="vlm", max_videos=1, max_frames=64))
    # 16 frames are 8 pictures deep (two frames a temporal patch). A 448x448 picture
    # is 1024 patches of 14x14; each holds 4 copies of the MLP's 1280 x 4 wide
    # activation in fp16; one picture's 16 heads of scores in fp32.
    per_picture = 1024 * 1280 * 4 * 2 * 4
    assert base.parts["vision"] == 16 * per_picture + 16 * 1024 * 1024 * 4
    assert longer.parts["vision"] - base.parts["vision"] == (32 - 8) * per_picture
    assert longer.bytes - base.bytes == (32 - 8) * per_picture
    # The entry's max_pixels sizes the pictures; a text model has no vision part.
    small = estimate(entry(repo, model_type="vlm", max_pixels=224 * 224, max_images=1))
    assert small.parts["vision"] == (1 + 2 * 8) * 256 * 1280 * 4 * 2 * 4 + 16 * 256 * 256 * 4
    assert "vision" not in estimate(entry("mlx-community/Qwen3-4B-4bit")).parts
