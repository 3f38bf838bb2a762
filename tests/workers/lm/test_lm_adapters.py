"""LoRA adapters per request on the lm worker (tiny real llama, random adapters in
mlx-lm's format built by the tests).

mlx-lm itself is the oracle: ``mlx_lm.load(model, adapter_path=…)`` applies an
adapter its own way, and our switched layers must give the same greedy ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlx_gateway.protocol.messages import (
    Done,
    Error,
    Generate,
    MountAdapter,
    SamplingParams,
    UnmountAdapter,
)
from mlx_gateway.workers.runtime.serve import _submit
from tests.fixtures.tiny_models import build_tiny_adapter

from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow

TOKENS = 16


@pytest.fixture(scope="module")
def adapters(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "a": build_tiny_adapter(root / "a", tiny_lm_path, seed=1),
        "b": build_tiny_adapter(root / "b", tiny_lm_path, seed=2, keys=("self_attn.o_proj",)),
    }


def mlx_lm_greedy(model: Path, adapter: Path | None, content: str) -> list[int]:
    """The greedy ids mlx-lm's own loader and generate_step give."""
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    loaded, tokenizer = load(str(model), adapter_path=str(adapter) if adapter else None)[:2]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True
    )
    ids = []
    for token, _ in generate_step(mx.array(prompt), loaded, max_tokens=TOKENS):
        ids.append(int(token))
    return ids


def with_adapters(model: Path, adapters: dict[str, Path], **options: Any) -> Recorder:
    return Recorder(model, adapters={k: str(v) for k, v in adapters.items()}, **options)


def send(rec: Recorder, request: Any) -> None:
    """As the worker's serve loop hands a request over: a refusal becomes an Error."""
    _submit(rec.backend, request, [], rec.replies.append)


def submit(rec: Recorder, request_id: str, content: str, adapters: list[str]) -> None:
    send(
        rec,
        Generate(
            request_id=request_id,
            messages=[{"role": "user", "content": content}],
            sampling=SamplingParams(max_tokens=TOKENS, temperature=0.0),
            adapters=adapters,
        ),
    )


def test_an_adapter_gives_mlx_lms_own_ids_and_none_the_base(
    tiny_lm_path: Path, adapters: dict[str, Path]
) -> None:
    content = PROMPTS["b"]
    base = mlx_lm_greedy(tiny_lm_path, None, content)
    tuned = mlx_lm_greedy(tiny_lm_path, adapters["a"], content)
    assert tuned != base  # the adapter changes greedy output
    for solo in (True, False):  # alone, and in a batch of one
        rec = with_adapters(tiny_lm_path, adapters, solo=solo, prompt_cache_bytes=0)
        submit(rec, "tuned", content, ["a"])
        rec.run()
        submit(rec, "base", content, [])
        rec.run()
        submit(rec, "again", content, ["a"])
        rec.run()
        assert rec.tokens["tuned"] == tuned == rec.tokens["again"], solo
        assert rec.tokens["base"] == base, solo
        rec.close()


def test_stacked_adapters_add_their_deltas(tiny_lm_path: Path, adapters: dict[str, Path]) -> None:
    rec = with_adapters(tiny_lm_path, adapters, prompt_cache_bytes=0)
    for key, ids in {"a": ["a"], "b": ["b"], "a+b": ["a", "b"], "none": []}.items():
        submit(rec, key, PROMPTS["c"], ids)
        rec.run()
    outputs = {tuple(rec.tokens[k]) for k in ("a", "b", "a+b", "none")}
    assert len(outputs) == 4  # each set gives its own text
    rec.close()


def test_requests_of_different_adapters_are_grouped_and_each_is_right(
    tiny_lm_path: Path, adapters: dict[str, Path]
) -> None:
    alone = with_adapters(tiny_lm_path, adapters, prompt_cache_bytes=0)
    plan = [("p1", "a", ["a"]), ("p2", "b", []), ("p3", "c", ["a"]), ("p4", "d", ["b"])]
    for request_id, prompt, ids in plan:
        submit(alone, request_id, PROMPTS[prompt], ids)
        alone.run()
    alone.close()
    rec = with_adapters(tiny_lm_path, adapters, prompt_cache_bytes=0)
    for request_id, prompt, ids in plan:  # all at once
        submit(rec, request_id, PROMPTS[prompt], ids)
    seen_groups = []
    for _ in range(10_000):
        if not rec.backend.has_work():
            break
        rec.step()
        running = {
            a.adapters
            for a in rec.backend.scheduler._by_id.values()
            if not rec.backend.scheduler._queued(a)
        }
        assert len(running) <= 1  # one adapter set runs at a time
        if running and (not seen_groups or seen_groups[-1] != running):
            seen_groups.append(running)
    # In arrival order: p1 (a), then p2 (base), then p3 (a) — it does not pass p2 —, p4 (b).
    assert [next(iter(g)) for g in seen_groups] == [("a",), (), ("a",), ("b",)]
    for request_id, _, _ in plan:
        assert rec.tokens[request_id] == alone.tokens[request_id], request_id
    rec.close()


def test_the_prompt_cache_does_not_cross_adapters(
    tiny_lm_path: Path, adapters: dict[str, Path]
) -> None:
    rec = with_adapters(tiny_lm_path, adapters)
    submit(rec, "tuned", PROMPTS["d"], ["a"])
    rec.run()
    submit(rec, "base", PROMPTS["d"], [])
    rec.run()
    assert rec.done("base").usage.cached_tokens == 0  # the tuned cache is not the base's
    submit(rec, "tuned again", PROMPTS["d"], ["a"])
    rec.run()
    assert rec.done("tuned again").usage.cached_tokens > 0
    assert rec.tokens["tuned again"] == rec.tokens["tuned"] != rec.tokens["base"]
    rec.close()


def test_mount_and_unmount_at_run_time(tiny_lm_path: Path, adapters: dict[str, Path]) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    submit(rec, "unknown", PROMPTS["a"], ["a"])
    (error,) = [r for r in rec.replies if isinstance(r, Error)]
    assert error.status == 400 and error.param == "adapter"
    assert "'a' is not mounted" in error.message and "mounted: none" in error.message
    send(rec, MountAdapter("m", "a", str(adapters["a"])))
    assert rec.done("m").finish_reason == "mounted"
    submit(rec, "tuned", PROMPTS["b"], ["a"])
    rec.run()
    assert rec.tokens["tuned"] == mlx_lm_greedy(tiny_lm_path, adapters["a"], PROMPTS["b"])
    # In use by a waiting request: refused.
    submit(rec, "waiting", PROMPTS["b"], ["a"])
    send(rec, UnmountAdapter("busy", "a"))
    busy = next(r for r in rec.replies if isinstance(r, Error) and r.request_id == "busy")
    assert busy.status == 409
    rec.run()
    send(rec, UnmountAdapter("u", "a"))
    assert rec.done("u").finish_reason == "unmounted"
    submit(rec, "gone", PROMPTS["b"], ["a"])
    gone = next(r for r in rec.replies if isinstance(r, Error) and r.request_id == "gone")
    assert gone.status == 400
    submit(rec, "base", PROMPTS["b"], [])
    rec.run()
    assert rec.tokens["base"] == mlx_lm_greedy(tiny_lm_path, None, PROMPTS["b"])
    rec.close()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("no config", "must be a folder holding adapter_config.json"),
        ("other model", "trained for another model"),
        ("dora", "'dora' is not served"),
    ],
)
def test_a_bad_adapter_is_a_clear_error_and_the_worker_goes_on(
    tiny_lm_path: Path, tmp_path: Path, damage: str, words: str
) -> None:
    from tests.fixtures.tiny_models import build_tiny_lm

    folder = tmp_path / "bad"
    if damage == "other model":
        wider = build_tiny_lm(tmp_path / "wider", hidden=128)
        build_tiny_adapter(folder, wider)
    else:
        build_tiny_adapter(folder, tiny_lm_path)
    if damage == "no config":
        (folder / "adapter_config.json").unlink()
    if damage == "dora":
        text = (folder / "adapter_config.json").read_text().replace('"lora"', '"dora"')
        (folder / "adapter_config.json").write_text(text)
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    send(rec, MountAdapter("m", "bad", str(folder)))
    (error,) = [r for r in rec.replies if isinstance(r, Error)]
    assert error.status == 400 and words in error.message, error.message
    assert not [r for r in rec.replies if isinstance(r, Done)]
    submit(rec, "after", PROMPTS["a"], [])  # the model is untouched
    rec.run()
    assert rec.tokens["after"] == mlx_lm_greedy(tiny_lm_path, None, PROMPTS["a"])
    rec.close()


def test_each_adapter_set_has_a_disk_tier_of_its_own(
    tiny_lm_path: Path, adapters: dict[str, Path], tmp_path: Path
) -> None:
    disk = {"prompt_cache_dir": str(tmp_path / "kv"), "prompt_cache_disk_bytes": 10**9}
    own = {"a": build_tiny_adapter(tmp_path / "a", tiny_lm_path, seed=1), "b": adapters["b"]}
    first = with_adapters(tiny_lm_path, own, **disk)
    submit(first, "tuned", PROMPTS["d"], ["a"])
    first.run()
    first.close()  # the worker stops: its prompt cache goes to disk
    folders = sorted(p.name for p in (tmp_path / "kv").iterdir())
    assert len(folders) == 1  # the base model's folder is made only when it saves

    second = with_adapters(tiny_lm_path, own, **disk)
    submit(second, "base", PROMPTS["d"], [])
    second.run()
    assert second.done("base").usage.cached_tokens == 0  # not from the adapter's folder
    submit(second, "b", PROMPTS["d"], ["b"])
    second.run()
    assert second.done("b").usage.cached_tokens == 0
    submit(second, "tuned", PROMPTS["d"], ["a"])
    second.run()
    resumed = second.done("tuned").usage
    assert resumed.cached_tokens == resumed.prompt_tokens - 1  # read back from disk
    assert second.tokens["tuned"] == first.tokens["tuned"]
    second.close()

    # The adapter's weights change in place: its saved caches no longer match.
    build_tiny_adapter(tmp_path / "a", tiny_lm_path, seed=9)
    third = with_adapters(tiny_lm_path, own, **disk)
    submit(third, "tuned", PROMPTS["d"], ["a"])
    third.run()
    assert third.done("tuned").usage.cached_tokens == 0
    third.close()
