"""The cached BPE detokenizer gives mlx-lm's text, token for token."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.tokenizer_utils import (
    BPEStreamingDetokenizer,
    NaiveStreamingDetokenizer,
    TokenizerWrapper,
)
from mlx_lm.tokenizer_utils import (
    load as load_tokenizer,
)

from mlx_gateway.workers.lm.detokenize import CachedBPEDetokenizer, Detokenizers


@pytest.fixture(scope="module")
def tokenizer(tiny_lm_path: Path) -> TokenizerWrapper:
    """The tests' byte-level BPE (every byte is a token, so random ids split UTF-8
    characters, make lone spaces and invalid bytes)."""
    wrapper = load_tokenizer(tiny_lm_path)
    assert type(wrapper.detokenizer) is BPEStreamingDetokenizer
    return wrapper


def _steps(detokenizer: object, ids: list[int]) -> list[tuple[str, str, list[int], str]]:
    seen = []
    for token in ids:
        detokenizer.add_token(token)  # type: ignore[attr-defined]
        seen.append(
            (
                detokenizer.last_segment,  # type: ignore[attr-defined]
                detokenizer.text,  # type: ignore[attr-defined]
                list(detokenizer.tokens),  # type: ignore[attr-defined]
                detokenizer._unflushed,  # type: ignore[attr-defined]
            )
        )
    detokenizer.finalize()  # type: ignore[attr-defined]
    seen.append((detokenizer.last_segment, detokenizer.text, [], ""))  # type: ignore[attr-defined]
    return seen


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_same_text_as_mlx_lm_on_any_token_sequence(
    tokenizer: TokenizerWrapper, data: st.DataObject
) -> None:
    vocab = len(tokenizer.detokenizer.tokenmap)
    ids = data.draw(st.lists(st.integers(0, vocab + 2), max_size=60), label="ids")
    detokenizers = Detokenizers(tokenizer)
    ours = detokenizers.new()
    assert isinstance(ours, CachedBPEDetokenizer)
    assert _steps(ours, ids) == _steps(tokenizer.detokenizer, ids)
    # The table is shared: a second request over the same ids, now all cached.
    assert _steps(detokenizers.new(), ids) == _steps(tokenizer.detokenizer, ids)


def test_requests_interleaved_share_the_table_but_not_their_text(
    tokenizer: TokenizerWrapper,
) -> None:
    detokenizers = Detokenizers(tokenizer)
    one, two = detokenizers.new(), detokenizers.new()
    a = tokenizer.encode("héllo wörld, ünïcode ✓", add_special_tokens=False)
    b = tokenizer.encode(" spaces  and\ttabs ", add_special_tokens=False)
    for i in range(max(len(a), len(b))):
        if i < len(a):
            one.add_token(a[i])
        if i < len(b):
            two.add_token(b[i])
    one.finalize()
    two.finalize()
    reference = tokenizer.detokenizer
    for token in a:
        reference.add_token(token)
    reference.finalize()
    assert one.text == reference.text == "héllo wörld, ünïcode ✓"
    reference.reset()
    for token in b:
        reference.add_token(token)
    reference.finalize()
    assert two.text == reference.text


def test_other_detokenizers_are_the_tokenizers_own(tiny_lm_path: Path) -> None:
    wrapper = load_tokenizer(tiny_lm_path)
    naive = TokenizerWrapper(wrapper._tokenizer, detokenizer_class=NaiveStreamingDetokenizer)
    assert type(Detokenizers(naive).new()) is NaiveStreamingDetokenizer
