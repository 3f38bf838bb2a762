"""A Wyoming client that closes its connection with the server's answer unread (the
kernel then resets the connection): the server ends that connection quietly (a
debug line), with no "Task exception was never retrieved" from asyncio, and goes
on serving. The real Wyoming server of the gateway over real TCP."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import struct
import time

import pytest
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from mlx_gateway.supervisor.config.schema import WyomingConfig
from tests.e2e.gateway import free_port
from tests.supervisor.live import LiveGateway
from tests.waiting import until_sync

pytestmark = pytest.mark.slow


def connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port))
        except ConnectionRefusedError:  # the listener may still be starting
            assert time.monotonic() < deadline
            time.sleep(0.05)


def whole_event_unread(sock: socket.socket) -> bool:
    """Whether a whole Wyoming event waits unread on ``sock`` (read with MSG_PEEK)."""
    try:
        unread = sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    header, newline, rest = unread.partition(b"\n")
    if not newline:
        return False
    fields = json.loads(header)
    return len(rest) >= fields.get("data_length", 0) + fields.get("payload_length", 0)


def reset_with_the_answer_unread(port: int) -> None:
    """Ask (Describe), let the answer arrive, and close without reading it: with
    data unread, closing sends a reset instead of a FIN."""
    with connect(port) as sock:
        sock.sendall(b'{"type": "describe"}\n')
        # the whole Info is in our receive buffer now (its header line, data and
        # payload), so the server has written it and waits for the next event
        until_sync(lambda: whole_event_unread(sock), 10)
        # the server waits for the next event when the reset comes
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def describe(port: int) -> Info:
    client = AsyncTcpClient("127.0.0.1", port)
    await client.connect()
    try:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), 10)
        assert event is not None and Info.is_type(event.type)
        return Info.from_event(event)
    finally:
        await client.disconnect()


def test_a_reset_connection_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    wyoming = WyomingConfig(port=port, host="127.0.0.1")
    caplog.set_level(logging.DEBUG)
    with LiveGateway({"model_path": "fake/ok"}, wyoming=wyoming):
        for _ in range(3):
            reset_with_the_answer_unread(port)
        # the server saw the three resets (and ended those connections)
        ended = ("a Wyoming connection ended", "a Wyoming client left")
        until_sync(
            lambda: sum(any(e in r.getMessage() for e in ended) for r in caplog.records) >= 3,
            10,
            lambda: [r.getMessage() for r in caplog.records][-5:],
        )
        gc.collect()  # asyncio reports a never-retrieved exception when the task goes
        assert asyncio.run(describe(port)) is not None  # still serving
    unretrieved = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not unretrieved, unretrieved[0].getMessage()
    quiet = [r for r in caplog.records if "Wyoming connection" in r.getMessage()]
    assert quiet and all(r.levelno == logging.DEBUG for r in quiet)
