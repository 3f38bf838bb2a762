"""Stop-string holdback as a pure function."""

from __future__ import annotations

import random

import pytest

from mlx_gateway.workers.common.stops import StopScan, partial_stop_length, scan_stops


def stream(segments: list[str], stops: list[str]) -> tuple[list[str], bool]:
    """Feed segments as the worker does; returns what was sent and whether it stopped."""
    held, sent = "", []
    for i, segment in enumerate(segments):
        emit, held, stopped = scan_stops(held, segment, stops, final=i == len(segments) - 1)
        sent.append(emit)
        if stopped:
            return sent, True
    return sent, False


def test_no_stops_passes_text_through() -> None:
    assert scan_stops("", "hello", []) == StopScan("hello", "", False)


def test_possible_start_of_a_stop_is_held_back() -> None:
    assert scan_stops("", "hello wo", ["world"]) == StopScan("hello ", "wo", False)


def test_held_text_completes_the_match() -> None:
    assert scan_stops("wo", "rld and more", ["world"]) == StopScan("", "", True)


def test_held_text_released_when_it_does_not_match() -> None:
    assert scan_stops("wo", "nder", ["world"]) == StopScan("wonder", "", False)


def test_text_is_cut_before_the_earliest_stop() -> None:
    assert scan_stops("", "a, b. c", [".", ","]) == StopScan("a", "", True)


def test_final_segment_releases_a_partial_match() -> None:
    assert scan_stops("", "the end wor", ["world"], final=True) == StopScan(
        "the end wor", "", False
    )


def test_longest_partial_is_held() -> None:
    assert partial_stop_length("xaab", ["aabc"]) == 3
    assert partial_stop_length("xaa", ["aab", "ab"]) == 2
    assert partial_stop_length("abc", ["zzz"]) == 0
    assert partial_stop_length("xa", ["ab"]) == 1


@pytest.mark.parametrize("seed", range(50))
def test_any_segmentation_sends_exactly_the_text_before_the_stop(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice("ab c") for _ in range(40))
    stop = text[rng.randrange(5, 30) :][: rng.randrange(1, 5)]
    stops = [stop, "zz"]  # a second stop that never matches
    cuts = sorted(rng.sample(range(1, len(text)), rng.randrange(0, 20)))
    segments = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    sent, stopped = stream(segments, stops)
    assert stopped
    assert "".join(sent) == text[: text.find(stop)]


def test_no_stop_in_text_sends_everything() -> None:
    segments = ["wor", "ld", " wo", "r"]
    sent, stopped = stream(segments, ["world!"])
    assert not stopped
    assert "".join(sent) == "world wor"
