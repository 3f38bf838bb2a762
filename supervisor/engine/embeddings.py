"""One embeddings request on an embeddings worker, and its matrix read back.

The worker answers an ``Embed`` with one ``Embeddings`` header and the matrix as one
binary frame of little-endian float32 rows; the OpenAI and Ollama surfaces both run
it through :func:`embed` and read the rows with :func:`split_rows` or
:func:`float_rows`.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Sequence

from mlx_gateway.protocol.messages import Done, Embed, Embeddings
from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall, unwrap


async def embed(
    handle: ModelHandle, msg: Embed, files: Sequence[bytes] = ()
) -> tuple[Embeddings, bytes, int]:
    """Run ``msg`` (its image inputs' ``files`` as payload frames) on ``handle``'s
    worker: the header, the matrix bytes and the prompt tokens. Raises the
    worker's error as a :class:`GatewayError`; when cancelled (the client left)
    the worker is told to drop the request."""
    result: tuple[Embeddings, bytes] | None = None
    recorder.note_handle(handle)
    async with WorkerCall(handle, msg, files) as call:
        async for item in call:
            match unwrap(item):
                case Embeddings() as header, [matrix, *_]:
                    result = header, matrix
                case Done(usage=usage), _:
                    if result is not None:
                        recorder.note_done("stop", usage.prompt_tokens, 0)
                        return result[0], result[1], usage.prompt_tokens
    raise ModelUnavailable(
        "The worker ended the request without embeddings.", code="incomplete_generation"
    )


def split_rows(header: Embeddings, matrix: bytes) -> list[memoryview]:
    """The matrix's rows as byte views; a size that does not match is a 500."""
    width = header.dims * 4
    if len(matrix) != header.rows * width:
        raise GatewayError(
            f"The worker sent {len(matrix)} bytes for a {header.rows} by {header.dims} matrix.",
            code="bad_worker_reply",
        )
    view = memoryview(matrix)
    return [view[i * width : (i + 1) * width] for i in range(header.rows)]


def float_rows(header: Embeddings, matrix: bytes) -> list[list[float]]:
    """The matrix's rows as lists of floats."""
    return [floats(row) for row in split_rows(header, matrix)]


def floats(row: memoryview) -> list[float]:
    """A row of the matrix as floats."""
    values = array.array("f")
    values.frombytes(row)
    if sys.byteorder == "big":  # the wire format is little-endian
        values.byteswap()
    return values.tolist()


def input_groups(header: Embeddings, matrix: bytes) -> list[list[list[float]]]:
    """A multi-vector model's rows grouped per input (``header.vectors``)."""
    rows = float_rows(header, matrix)
    if sum(header.vectors) != len(rows):
        raise GatewayError(
            f"The worker sent {len(rows)} rows for inputs of {header.vectors} vectors.",
            code="bad_worker_reply",
        )
    groups, start = [], 0
    for count in header.vectors:
        groups.append(rows[start : start + count])
        start += count
    return groups


def summary(vectors: list[list[float]]) -> list[float]:
    """One vector for an input of many: their mean, L2-normalized."""
    width = len(vectors[0])
    mean = [sum(v[j] for v in vectors) / len(vectors) for j in range(width)]
    norm = max(sum(x * x for x in mean) ** 0.5, 1e-12)
    return [x / norm for x in mean]


def one_per_input(header: Embeddings, matrix: bytes) -> list[list[float]]:
    """One vector per input: the rows, or a multi-vector model's :func:`summary`."""
    if not header.vectors:
        return float_rows(header, matrix)
    return [summary(group) for group in input_groups(header, matrix)]
