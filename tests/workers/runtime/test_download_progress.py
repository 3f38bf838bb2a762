"""Download progress: our tqdm class driven through huggingface_hub's own progress
helpers, the way ``snapshot_download`` uses them (no hub is reachable here)."""

from __future__ import annotations

import logging

from huggingface_hub.utils.tqdm import _create_progress_bar, hf_thread_map

from mlx_gateway.workers.runtime.download import BYTES_BAR, DOWNLOAD, describe, progress_tqdm_class


def test_the_snapshot_byte_bar_is_recorded() -> None:
    cls = progress_tqdm_class()
    DOWNLOAD.take()  # start clean
    bar = _create_progress_bar(
        cls=cls, log_level=logging.INFO, name=BYTES_BAR, total=0, initial=0, unit="B"
    )
    # What huggingface_hub does per file: grow the total, then add the bytes.
    bar.total = 2_000_000_000
    bar.update(500_000_000)
    assert DOWNLOAD.take() == (500_000_000, 2_000_000_000)
    assert DOWNLOAD.take() is None  # nothing new since
    bar.update(1_500_000_000)
    done, total = DOWNLOAD.take() or (0, 0)
    assert describe(done, total) == (1.0, "2.0 of 2.0 GB")


def test_other_bars_are_silent_and_still_work() -> None:
    cls = progress_tqdm_class()
    DOWNLOAD.take()
    # The per-file bar of snapshot_download is a thread_map over the files.
    assert hf_thread_map(lambda x: x * 2, [1, 2, 3], tqdm_class=cls, max_workers=2) == [2, 4, 6]
    other = _create_progress_bar(cls=cls, log_level=logging.INFO, name="x", total=10)
    other.update(5)
    assert DOWNLOAD.take() is None


def test_describe() -> None:
    assert describe(0, 0) == (None, "0.0 of 0.0 MB")
    assert describe(25_000_000, 100_000_000) == (0.25, "25.0 of 100.0 MB")
