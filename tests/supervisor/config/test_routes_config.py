"""The ``routes:`` section: served names standing for a list of models, checked
with the file's line (unknown model, clashing name, empty list, unknown strategy,
a route naming a route)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config

MODELS = """\
models:
  - {model_path: mlx-community/Qwen3-0.6B-4bit, served_model_name: small, aliases: [tiny]}
  - {model_path: mlx-community/Qwen3-4B-4bit, served_model_name: big}
"""


def load(tmp_path: Path, routes: str) -> object:
    path = tmp_path / "config.yaml"
    path.write_text(MODELS + textwrap.dedent(routes))
    return load_config(path)


def refused(tmp_path: Path, routes: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, routes)
    return info.value


def test_a_route_loads_with_its_strategy_and_models(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """\
        routes:
          - {name: chat, strategy: spillover, models: [big, tiny]}
          - {name: any, models: [small]}
        """,
    )
    first, second = config.routes  # type: ignore[attr-defined]
    assert (first.name, first.strategy, first.models) == ("chat", "spillover", ("big", "tiny"))
    assert second.strategy == "fallback"  # the default


def test_no_routes_is_an_empty_list(tmp_path: Path) -> None:
    assert load(tmp_path, "").routes == []  # type: ignore[attr-defined]


def test_an_unknown_model_is_named_with_its_line(tmp_path: Path) -> None:
    error = refused(tmp_path, "routes:\n  - name: chat\n    models: [big, huge]\n")
    assert "routes[0].models[1]" in str(error) and "config.yaml:6" in str(error)
    assert "'huge' is not a served_model_name or alias" in str(error)
    assert "small, big" in str(error)


def test_a_name_clashing_with_a_model_is_refused(tmp_path: Path) -> None:
    for name in ("big", "TINY", "small:latest"):
        error = refused(tmp_path, f"routes:\n  - {{name: '{name}', models: [big]}}\n")
        assert "routes[0].name" in str(error) and "is already a name of the model" in str(error)


def test_two_routes_of_one_name_are_refused(tmp_path: Path) -> None:
    error = refused(
        tmp_path, "routes:\n  - {name: chat, models: [big]}\n  - {name: Chat, models: [small]}\n"
    )
    assert "routes[1].name" in str(error) and "already used by routes[0]" in str(error)


def test_an_empty_list_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "routes:\n  - {name: chat, models: []}\n")
    assert "routes[0].models" in str(error) and "config.yaml:5" in str(error)


def test_an_unknown_strategy_is_refused_with_the_choices(tmp_path: Path) -> None:
    error = refused(tmp_path, "routes:\n  - {name: chat, strategy: random, models: [big]}\n")
    assert "routes[0].strategy" in str(error)
    assert "fallback, spillover, warm" in str(error)


def test_a_route_naming_a_route_is_refused(tmp_path: Path) -> None:
    error = refused(
        tmp_path,
        "routes:\n  - {name: a, models: [big]}\n  - {name: b, models: [small, a]}\n",
    )
    assert "routes[1].models[1]" in str(error) and "'a' is a route" in str(error)


def test_a_model_twice_in_a_route_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, "routes:\n  - {name: chat, models: [small, tiny]}\n")
    assert "already in this route" in str(error)
