"""LoRA adapters per request through the real ``mlx-gateway`` command, a real lm
worker and the clients' own SDKs (OpenAI, Anthropic): tiny random adapters in
mlx-lm's format change greedy output, ``none`` restores it, unknown ids are a 400
naming the mounted ones, and the admin routes mount and unmount at run time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fixtures.tiny_models import build_tiny_adapter, build_tiny_lm

from .gateway import Gateway

pytestmark = pytest.mark.slow

USER, ADMIN = "sk-user", "sk-admin"
ASK = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog"}]


@pytest.fixture(scope="module")
def folders(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "a": build_tiny_adapter(root / "a", tiny_lm_path, seed=1),
        "b": build_tiny_adapter(root / "b", tiny_lm_path, seed=2, keys=("self_attn.o_proj",)),
        "wide": build_tiny_adapter(root / "wide", build_tiny_lm(root / "wide-lm", hidden=128)),
    }


@pytest.fixture(scope="module")
def gateway(
    tiny_lm_path: Path, folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw-adapters"),
        [
            {
                "served_model_name": "tiny",
                "model_path": str(tiny_lm_path),
                "adapters": {"a": str(folders["a"])},
            },
            {
                "served_model_name": "tuned",
                "model_path": str(tiny_lm_path),
                "adapter_path": str(folders["a"]),  # mlx_lm.server's --adapter-path
            },
        ],
        api_keys=[USER],
        admin_keys=[ADMIN],
    )
    yield gw
    gw.stop()


def sdk(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.base_url}/v1", api_key=USER, max_retries=0)


def answer(gw: Gateway, model: str, **extra: Any) -> str:
    reply = sdk(gw).chat.completions.create(
        model=model, messages=ASK, max_tokens=16, temperature=0, extra_body=extra or None
    )  # type: ignore[call-overload]
    return str(reply.choices[0].message.content)


def admin(gw: Gateway, method: str, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {ADMIN}"}
    return httpx.request(method, f"{gw.base_url}{path}", headers=headers, timeout=60, **kwargs)


def test_an_adapter_changes_the_answer_and_none_restores_it(
    gateway: Gateway, folders: dict[str, Path]
) -> None:
    base = answer(gateway, "tiny")
    tuned = answer(gateway, "tiny", adapter="a")
    assert tuned != base
    assert answer(gateway, "tiny", adapter="none") == base
    # adapter_path: the default of requests that name none; "none" still wins.
    assert answer(gateway, "tuned") == tuned
    # /health's loaded_adapter (mlx-vlm's field): the folder of the latest request's.
    assert httpx.get(f"{gateway.base_url}/health").json()["loaded_adapter"] == str(folders["a"])
    assert answer(gateway, "tuned", adapter="none") == base
    assert httpx.get(f"{gateway.base_url}/health").json()["loaded_adapter"] is None
    # The same field on the other APIs.
    text = sdk(gateway).completions.create(
        model="tiny", prompt="hello world", max_tokens=8, temperature=0, extra_body={"adapter": "a"}
    )
    plain = sdk(gateway).completions.create(
        model="tiny", prompt="hello world", max_tokens=8, temperature=0
    )
    assert text.choices[0].text != plain.choices[0].text
    response = sdk(gateway).responses.create(
        model="tiny",
        input=ASK[0]["content"],
        max_output_tokens=16,
        temperature=0,
        extra_body={"adapter": "a"},
    )
    assert response.output_text == tuned
    claude = anthropic.Anthropic(base_url=gateway.base_url, api_key=USER, max_retries=0)
    message = claude.messages.create(
        model="tiny", max_tokens=16, messages=ASK, extra_body={"adapter": "a", "temperature": 0}
    )  # type: ignore[arg-type]
    assert message.content[0].text == tuned  # type: ignore[union-attr]


def test_an_unknown_adapter_is_a_400_naming_the_mounted_ones(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        answer(gateway, "tiny", adapter="nope")
    error = info.value.body
    assert isinstance(error, dict) and error["param"] == "adapter"
    assert "'nope' is not mounted on model 'tiny' (mounted: a)" in error["message"]
    with pytest.raises(openai.BadRequestError):
        answer(gateway, "tiny", adapter="a+nope")
    claude = anthropic.Anthropic(base_url=gateway.base_url, api_key=USER, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model="tiny", max_tokens=4, messages=ASK, extra_body={"adapter": "nope"}
        )  # type: ignore[arg-type]
    assert "mounted: a" in str(refused.value)


def test_mount_stack_unmount_at_run_time_and_after_a_restart(
    gateway: Gateway, folders: dict[str, Path]
) -> None:
    # Admin routes need the admin key.
    user = httpx.get(f"{gateway.base_url}/v1/adapters", headers={"authorization": f"Bearer {USER}"})
    assert user.status_code == 403
    listed = admin(gateway, "GET", "/v1/adapters").json()["data"]
    assert {(x["model"], x["id"], x["source"], x["default"]) for x in listed} == {
        ("tiny", "a", "config", False),
        ("tuned", "default", "config", True),
    }
    answer(gateway, "tiny")  # the worker runs: the mount goes to it at once
    mounted = admin(
        gateway,
        "POST",
        "/v1/adapters",
        json={"model": "tiny", "id": "b", "path": str(folders["b"])},
    )
    assert mounted.status_code == 200 and mounted.json()["mounted"] is True
    a, b, both = (answer(gateway, "tiny", adapter=x) for x in ("a", "b", "a+b"))
    assert len({a, b, both, answer(gateway, "tiny")}) == 4
    # Not an adapter folder: refused by the gateway.
    wrong = admin(
        gateway, "POST", "/v1/adapters", json={"model": "tiny", "id": "w", "path": "/nonexistent"}
    )
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "path"
    # An adapter of another model: refused by the worker, not kept, the model unharmed.
    other = admin(
        gateway,
        "POST",
        "/v1/adapters",
        json={"model": "tiny", "id": "w", "path": str(folders["wide"])},
    )
    assert other.status_code == 400, other.text
    assert "trained for another model" in other.json()["error"]["message"]
    listed = admin(gateway, "GET", "/v1/adapters", params={"model": "tiny"}).json()["data"]
    assert [x["id"] for x in listed] == ["a", "b"]
    assert answer(gateway, "tiny", adapter="a+b") == both
    # A restart (unload, next request) keeps the run-time mount.
    assert admin(gateway, "POST", "/v1/models/tiny/unload").status_code == 200
    assert answer(gateway, "tiny", adapter="b") == b
    # Mounted while the model is stopped: taken at its next start.
    assert admin(gateway, "POST", "/v1/models/tiny/unload").status_code == 200
    later = admin(
        gateway,
        "POST",
        "/v1/adapters",
        json={"model": "tiny", "id": "c", "path": str(folders["b"])},
    )
    assert later.json()["mounted"] is False
    assert answer(gateway, "tiny", adapter="c") == b
    # Unmounted: the id is gone, its text with it.
    gone = admin(gateway, "DELETE", "/v1/adapters/b", params={"model": "tiny"})
    assert gone.status_code == 200
    with pytest.raises(openai.BadRequestError):
        answer(gateway, "tiny", adapter="b")
    missing = admin(gateway, "DELETE", "/v1/adapters/b", params={"model": "tiny"})
    assert missing.status_code == 404 and "mounted: a, c" in missing.json()["error"]["message"]
