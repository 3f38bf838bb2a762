"""The one lookup of a request's model name (supervisor/pool/names.py): exact names
first, then ``:latest`` added or dropped, then Ollama's case-insensitive match;
served names and aliases before ``model_path``; ties to the earlier entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.errors import ModelNotFound
from mlx_gateway.supervisor.pool.names import NameIndex, bare, fold, listed


@dataclass(frozen=True)
class Entry:
    config: ModelConfig


def index(*entries: dict[str, Any]) -> NameIndex[Entry]:
    return NameIndex(Entry(model_entry(**{"model_path": "m", **e})) for e in entries)


def found(names: NameIndex[Entry], name: str) -> tuple[str, str] | None:
    """(served name of the model ``name`` finds, the name it matched)."""
    match = names.find(name)
    return None if match is None else (match.handle.config.served_model_name, match.name)


def test_the_name_forms() -> None:
    assert listed("smolgguf") == "smolgguf:latest"
    assert listed("qwen3:4b") == "qwen3:4b"
    assert listed("org/model") == "org/model:latest"
    assert listed("host:8080/org/model") == "host:8080/org/model:latest"
    assert bare("smolgguf:latest") == "smolgguf" and bare("qwen3:4b") == "qwen3:4b"
    # Ollama folds ASCII letters only.
    assert fold("Qwen3-ÄB") == "qwen3-Äb"


def test_tags_both_ways_and_case_aliases_and_model_path() -> None:
    names = index(
        {"served_model_name": "smolgguf", "model_path": "ollama:smolgguf:latest"},
        {"served_model_name": "qwen3:4b", "aliases": ["Fast"], "model_path": "org/Qwen3-4B"},
    )
    for asked in ("smolgguf", "smolgguf:latest", "SmolGGUF", "SMOLGGUF:LATEST"):
        assert found(names, asked) == ("smolgguf", "smolgguf")
    assert found(names, "ollama:smolgguf:latest") == ("smolgguf", "ollama:smolgguf:latest")
    assert found(names, "ollama:smolgguf") == ("smolgguf", "ollama:smolgguf:latest")
    assert found(names, "Qwen3:4B") == ("qwen3:4b", "qwen3:4b")
    assert found(names, "qwen3") is None  # another tag is another model
    assert found(names, "qwen3:4b:latest") == ("qwen3:4b", "qwen3:4b")
    for asked in ("Fast", "fast", "fast:latest", "FAST:Latest"):
        assert found(names, asked) == ("qwen3:4b", "Fast")
    assert found(names, "org/qwen3-4b") == ("qwen3:4b", "org/Qwen3-4B")
    assert found(names, "org/Qwen3-4B:latest") == ("qwen3:4b", "org/Qwen3-4B")
    assert found(names, "nothing") is None
    assert found(names, "") is None


def test_an_exact_name_wins_and_a_looser_one_picks_the_same_entry_every_time() -> None:
    names = index(
        {"served_model_name": "x", "model_path": "a"},
        {"served_model_name": "x:latest", "model_path": "b"},
        {"served_model_name": "Foo", "model_path": "c"},
        {"served_model_name": "foo", "model_path": "d"},
        {"served_model_name": "y:latest", "model_path": "e"},
        {"served_model_name": "Y", "model_path": "f"},
    )
    assert found(names, "x") == ("x", "x")
    assert found(names, "x:latest") == ("x:latest", "x:latest")
    assert found(names, "X") == ("x", "x")  # case only: the entry without a tag
    assert found(names, "X:LATEST") == ("x:latest", "x:latest")
    assert found(names, "Foo") == ("Foo", "Foo")
    assert found(names, "foo") == ("foo", "foo")
    assert found(names, "FOO") == ("Foo", "Foo")  # the earlier entry
    assert found(names, "foo:latest") == ("foo", "foo")  # the tag dropped, its case kept
    assert found(names, "y") == ("y:latest", "y:latest")  # the tag before the case
    assert found(names, "Y:latest") == ("Y", "Y")  # the tag dropped: "Y" exactly
    assert found(names, "Y:LATEST") == ("y:latest", "y:latest")


def test_a_served_name_or_alias_beats_a_model_path() -> None:
    names = index(
        {"served_model_name": "one", "model_path": "shared"},
        {"served_model_name": "two", "model_path": "other", "aliases": ["shared"]},
        {"served_model_name": "three", "model_path": "org/m"},
        {"served_model_name": "org/M", "model_path": "x"},
    )
    assert found(names, "shared") == ("two", "shared")
    assert found(names, "org/m") == ("three", "org/m")  # exact path before a name's case
    assert found(names, "ORG/M") == ("org/M", "org/M")  # same step: the name first


@pytest.mark.slow
async def test_the_registry_resolves_through_it_and_after_a_reload(make_registry: Any) -> None:
    registry = await make_registry(
        {"model_path": "fake/ok", "served_model_name": "smolgguf", "on_demand": True}
    )
    assert registry.resolve("SmolGGUF:latest") is registry.resolve("smolgguf")
    match = registry.lookup("smolgguf:latest")
    assert match is not None and match.name == "smolgguf"
    with pytest.raises(ModelNotFound) as info:
        registry.resolve("smolgguf:7b")
    assert "'smolgguf:7b'" in info.value.message and "smolgguf" in info.value.message
    new = model_entry(model_path="fake/ok", served_model_name="Other", on_demand=True)
    await registry.reload(GatewayConfig(server=registry.config.server, models=[new]))
    assert registry.resolve("other:latest").name == "Other"
    with pytest.raises(ModelNotFound):
        registry.resolve("smolgguf")
