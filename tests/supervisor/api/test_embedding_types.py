"""The embeddings endpoint's pure parts: reading ``input`` and rendering the matrix."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import numpy as np
import pytest

from mlx_gateway.protocol.messages import Embeddings
from mlx_gateway.supervisor.api.embeddings.inputs import MAX_INPUTS, EmbeddingUsage, split_input
from mlx_gateway.supervisor.api.embeddings.routes import render
from mlx_gateway.supervisor.errors import BadRequest, GatewayError


@pytest.mark.parametrize(
    ("value", "texts", "token_ids"),
    [
        ("hi", ["hi"], []),
        (["a", "b"], ["a", "b"], []),
        ([1, 2, 3], [], [[1, 2, 3]]),
        ([[1, 2], [3]], [], [[1, 2], [3]]),
        (["a"] * MAX_INPUTS, ["a"] * MAX_INPUTS, []),
        ([7] * (MAX_INPUTS + 5), [], [[7] * (MAX_INPUTS + 5)]),  # one long input
    ],
)
def test_input_shapes(value: Any, texts: list[str], token_ids: list[list[int]]) -> None:
    assert split_input(value) == (texts, token_ids)


@pytest.mark.parametrize(
    ("value", "param", "words"),
    [
        ("", "input", "empty string"),
        ([], "input", "empty list"),
        (["a", ""], "input[1]", "must not be empty"),
        ([[1], []], "input[1]", "must not be empty"),
        (["a", [1]], "input", "input[1] is a list of token ids but input[0] is a string"),
        ([[1], "a"], "input", "input[1] is a string but input[0] is a list of token ids"),
        (["a", 1], "input", "input[1] is a lone token id"),
        (["a"] * (MAX_INPUTS + 1), "input", f"at most {MAX_INPUTS}"),
    ],
)
def test_bad_inputs(value: Any, param: str, words: str) -> None:
    with pytest.raises(BadRequest) as info:
        split_input(value)
    assert info.value.param == param
    assert words in info.value.message


def test_render_float_and_base64() -> None:
    matrix = np.arange(6, dtype="<f4").reshape(2, 3) / 7
    header = Embeddings(request_id="r", rows=2, dims=3, prompt_tokens=5)
    usage = EmbeddingUsage(prompt_tokens=5, total_tokens=5)
    floats = msgspec.json.decode(render(header, matrix.tobytes(), "float", "m", usage))
    assert floats == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": row.tolist()}
            for i, row in enumerate(matrix)
        ],
        "model": "m",
        "usage": {"prompt_tokens": 5, "total_tokens": 5},
    }
    encoded = msgspec.json.decode(render(header, matrix.tobytes(), "base64", "m", usage))
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in encoded["data"]]
    np.testing.assert_array_equal(decoded, matrix)


def test_a_matrix_of_the_wrong_size_is_a_server_error() -> None:
    header = Embeddings(request_id="r", rows=2, dims=3)
    with pytest.raises(GatewayError) as info:
        render(header, b"\0" * 20, "float", "m", EmbeddingUsage(0, 0))
    assert info.value.status == 500
