"""A model's slots (``pool/slots.py``): interactive waiters first, arrival order
within a priority, and a slot handed to a waiter that was cancelled passes on."""

from __future__ import annotations

import asyncio

from mlx_gateway.protocol.messages import BATCH, INTERACTIVE, Priority
from mlx_gateway.supervisor.pool.slots import Slots


async def test_slots_go_to_interactive_waiters_first_and_survive_cancels() -> None:
    slots = Slots(1)
    await slots.acquire(BATCH)  # the one slot is taken
    order: list[str] = []

    async def wait(name: str, priority: Priority) -> None:
        await slots.acquire(priority)
        order.append(name)

    waiters = {
        name: asyncio.create_task(wait(name, priority))
        for name, priority in [
            ("b1", BATCH),
            ("i1", INTERACTIVE),
            ("b2", BATCH),
            ("i2", INTERACTIVE),
        ]
    }
    await asyncio.sleep(0)
    assert slots.waiting(INTERACTIVE) == 2 and slots.waiting(BATCH) == 2
    waiters["i2"].cancel()  # leaves the queue: never served
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0)
    slots.release()
    await asyncio.sleep(0)
    assert order == ["i1", "b1"]  # the interactive one first, then arrival order
    slots.release()  # handed to b2 …
    waiters["b2"].cancel()  # … which leaves before it runs: the slot comes back
    await asyncio.sleep(0)
    assert order == ["i1", "b1"] and waiters["b2"].cancelled()
    await asyncio.wait_for(slots.acquire(INTERACTIVE), timeout=1)  # free at once
