"""``server.wyoming.key``: Wyoming (which has no authentication) acts as one app of
``server.keys`` and offers only that app's models. The real Wyoming server of the
gateway over real TCP, with fake speech workers."""

from __future__ import annotations

import asyncio

from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.config.schema import WyomingConfig
from tests.e2e.gateway import free_port
from tests.supervisor.live import LiveGateway

MODELS = (
    {"model_path": "a/fake/ok", "served_model_name": "stt-house", "model_type": "whisper"},
    {"model_path": "b/fake/ok", "served_model_name": "stt-office", "model_type": "whisper"},
)


async def offered(port: int) -> list[str]:
    client = AsyncTcpClient("127.0.0.1", port)
    for _ in range(100):  # the listener may still be starting
        try:
            await client.connect()
            break
        except ConnectionRefusedError:
            await asyncio.sleep(0.05)
    try:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), 10)
        assert event is not None and Info.is_type(event.type)
        info = Info.from_event(event)
        return [model.name for program in info.asr for model in program.models]
    finally:
        await client.disconnect()


def test_wyoming_offers_only_its_apps_models() -> None:
    port = free_port()
    apps = [KeyConfig(name="home-assistant", key="sk-ha", models=["stt-house"])]
    wyoming = WyomingConfig(port=port, key="home-assistant")
    with LiveGateway(*MODELS, keys=apps, wyoming=wyoming):
        assert asyncio.run(offered(port)) == ["stt-house"]
    port = free_port()
    with LiveGateway(*MODELS, keys=apps, wyoming=WyomingConfig(port=port)):
        assert sorted(asyncio.run(offered(port))) == ["stt-house", "stt-office"]
