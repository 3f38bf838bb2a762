"""The prompt cache's disk tier (workers/disk_cache.py): real mlx-lm caches written
with save_prompt_cache, corrupt and stale files, the byte cap, and a real worker
whose successor resumes a conversation from disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Done, Ready, Shutdown
from mlx_gateway.workers.lm.disk_cache import SUFFIX, TOKENS, DiskCache
from mlx_gateway.workers.lm.prompt_cache import PromptCache
from tests.workers.harness import WorkerHarness
from tests.workers.lm.test_prompt_cache import kv_cache


def store_with_disk(folder: Path, key: str = "model-a", cap: int = 10**8) -> PromptCache:
    store = PromptCache(max_bytes=10**9, max_entries=1)
    store.disk = DiskCache(folder, key, cap)
    return store


def test_an_entry_leaving_the_lru_is_saved_and_a_new_store_loads_it(tmp_path: Path) -> None:
    first = store_with_disk(tmp_path)
    first.store(list(range(100)), kv_cache(100, fill=3.0))
    first.store([7, 7, 7], kv_cache(3))  # one entry at most: the first goes to disk
    assert len(list((tmp_path / "model-a").glob(f"*{SUFFIX}"))) == 1

    later = store_with_disk(tmp_path)  # a new worker of the same model
    hit = later.fetch([*range(100), 5000])
    assert hit is not None and hit.tokens == 100
    assert float(hit.cache[0].keys[0, 0, 0, 0]) == 3.0
    assert later.disk is not None and later.disk.loads == 1
    assert len(later) == 1  # it joined the memory store: the next turn needs no load
    assert later.fetch([*range(100), 5000, 1]) is not None and later.disk.loads == 1


def test_spill_writes_everything_and_a_short_match_does_not_load(tmp_path: Path) -> None:
    store = store_with_disk(tmp_path)
    store.store(list(range(40)), kv_cache(40))
    assert store.spill() == 1 and store.spill() == 0  # the same tokens are saved once
    later = store_with_disk(tmp_path)
    assert later.fetch([0, 1, 2, 3, 999]) is None  # 4 shared tokens: not worth a load
    assert later.disk is not None and later.disk.loads == 0


def test_a_corrupt_file_is_ignored_logged_and_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store_with_disk(tmp_path).store(list(range(64)), kv_cache(64))
    store_with_disk(tmp_path).spill()
    first = store_with_disk(tmp_path)
    first.store(list(range(64)), kv_cache(64))
    first.spill()
    (saved,) = (tmp_path / "model-a").glob(f"*{SUFFIX}")
    saved.write_bytes(saved.read_bytes()[:200])  # truncated: a crash mid-write, a full disk

    later = store_with_disk(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.workers.lm.disk_cache"):
        assert later.fetch([*range(64), 1]) is None
    assert "corrupt" in caplog.text and saved.name in caplog.text
    assert list((tmp_path / "model-a").iterdir()) == []
    # The store still works: the next entry is saved again.
    later.store(list(range(64)), kv_cache(64))
    assert later.spill() == 1


def test_a_file_of_another_model_version_is_stale(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = store_with_disk(tmp_path, key="v1")
    old.store(list(range(50)), kv_cache(50))
    old.spill()
    # The weights changed: the key (a hash of them) changed, but someone copied the
    # old folder over the new one.
    (tmp_path / "v1").rename(tmp_path / "v2")
    new = store_with_disk(tmp_path, key="v2")
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.workers.lm.disk_cache"):
        assert new.fetch([*range(50), 1]) is None
    assert "stale" in caplog.text
    assert list((tmp_path / "v2").glob(f"*{TOKENS}")) == []


def test_the_byte_cap_drops_the_least_recently_used_files(tmp_path: Path) -> None:
    probe = store_with_disk(tmp_path / "probe")
    probe.store(list(range(100)), kv_cache(100))
    probe.spill()
    one_file = sum(p.stat().st_size for p in (tmp_path / "probe" / "model-a").iterdir())

    store = store_with_disk(tmp_path / "capped", cap=int(one_file * 2.5))
    for start in (1000, 2000, 3000):
        store.store(list(range(start, start + 100)), kv_cache(100))
    store.spill()
    kept = [p.read_bytes() for p in (tmp_path / "capped" / "model-a").glob(f"*{TOKENS}")]
    assert len(kept) == 2
    # The oldest (first written when the LRU overflowed) went.
    assert all(not k.startswith((1000).to_bytes(4, "little")) for k in kept)


@pytest.mark.slow
def test_a_new_worker_resumes_a_conversation_from_disk(tmp_path: Path, tiny_lm_path: Path) -> None:
    options = {"prompt_cache_dir": str(tmp_path / "kv"), "prompt_cache_disk_bytes": 10**9}
    prompt = [(i * 37) % 300 + 10 for i in range(300)]
    (tmp_path / "a").mkdir()
    first = WorkerHarness(tmp_path / "a", tiny_lm_path, options=options)
    try:
        first.wait_other(Ready)
        first.generate("t1", raw_prompt=prompt, temperature=0.0, max_tokens=4)
        done = first.finished("t1")[-1]
        assert isinstance(done, Done) and done.usage.cached_tokens == 0
        first.send(Shutdown(grace=1.0))
        assert first.wait_exit(30) == 0
    finally:
        first.close()
    assert "wrote 1 prompt cache entries to disk" in first.stderr()

    (tmp_path / "b").mkdir()
    second = WorkerHarness(tmp_path / "b", tiny_lm_path, options=options)
    try:
        second.wait_other(Ready)
        second.generate("t2", raw_prompt=[*prompt, 11, 12, 13], temperature=0.0, max_tokens=2)
        done = second.finished("t2")[-1]
        assert isinstance(done, Done)
        assert done.usage.cached_tokens >= len(prompt), second.stderr()
    finally:
        second.close()
