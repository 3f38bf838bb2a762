"""Encoders and decoders, built once: msgpack headers on the wire."""

from __future__ import annotations

import msgspec

from mlx_gateway.protocol.messages import Reply, Request

encoder = msgspec.msgpack.Encoder()
request_decoder: msgspec.msgpack.Decoder[Request] = msgspec.msgpack.Decoder(Request)
reply_decoder: msgspec.msgpack.Decoder[Reply] = msgspec.msgpack.Decoder(Reply)


def encode(msg: Request | Reply) -> bytes:
    return encoder.encode(msg)


def decode_request(data: bytes) -> Request:
    """Decode a gateway → worker header. Raises ``msgspec.DecodeError``/``ValidationError``."""
    return request_decoder.decode(data)


def decode_reply(data: bytes) -> Reply:
    """Decode a worker → gateway header. Raises ``msgspec.DecodeError``/``ValidationError``."""
    return reply_decoder.decode(data)
