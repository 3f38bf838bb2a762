"""The multipart frame layout.

A worker's DEALER socket sends and receives::

    [header, payload_0, payload_1, ...]

The gateway's ROUTER socket sees one more frame in front, the worker's identity::

    [identity, header, payload_0, payload_1, ...]

``header`` is one msgpack-encoded message (see :mod:`.codec`). Payloads are raw
bytes (audio, images, float32 matrices) that a message refers to by index; they
are never base64 inside the header. The identity is the worker id encoded as UTF-8.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlx_gateway.protocol.codec import decode_reply, decode_request, encode
from mlx_gateway.protocol.messages import Reply, Request

Frame = bytes | bytearray | memoryview


def pack(msg: Request | Reply, payloads: Sequence[Frame] = ()) -> list[Frame]:
    """Frames for a DEALER send: the header then the payloads."""
    return [encode(msg), *payloads]


def pack_to(identity: bytes, msg: Request, payloads: Sequence[Frame] = ()) -> list[Frame]:
    """Frames for a ROUTER send to the worker ``identity``."""
    return [identity, encode(msg), *payloads]


def unpack_request(frames: Sequence[bytes]) -> tuple[Request, list[bytes]]:
    """Worker side: ``[header, *payloads]`` → (request, payloads)."""
    if not frames:
        raise ValueError("empty multipart message")
    return decode_request(frames[0]), list(frames[1:])


def unpack_reply(frames: Sequence[bytes]) -> tuple[str, Reply, list[bytes]]:
    """Gateway side: ``[identity, header, *payloads]`` → (worker id, reply, payloads)."""
    if len(frames) < 2:
        raise ValueError(f"expected identity and header, got {len(frames)} frame(s)")
    return bytes(frames[0]).decode(), decode_reply(frames[1]), list(frames[2:])
