"""The import direction of the packages: api → engine/http → pool → config → protocol.

Each rule lists the packages a layer must never import (at module level or inside a
function), checked on the source with ``ast`` so that a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "supervisor": "mlx_gateway.supervisor",
    "workers": "mlx_gateway.workers",
    "protocol": "mlx_gateway.protocol",
}

S = "mlx_gateway.supervisor"
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the wire vocabulary depends on nothing of ours
    "mlx_gateway.protocol": ("mlx_gateway.supervisor", "mlx_gateway.workers"),
    # workers run in their own processes: only the protocol is shared with the gateway
    "mlx_gateway.workers": ("mlx_gateway.supervisor",),
    # the configuration is read by everyone and reads nobody
    f"{S}.config": (f"{S}.pool", f"{S}.engine", f"{S}.http", f"{S}.api", f"{S}.app"),
    # worker processes know nothing of HTTP or of the APIs
    f"{S}.pool": (f"{S}.engine", f"{S}.http", f"{S}.api", f"{S}.app"),
    # the engine and the plumbing serve every surface and know none of them
    f"{S}.engine": (f"{S}.api", f"{S}.app"),
    f"{S}.http": (f"{S}.api", f"{S}.app"),
    # peer gateways are reached over HTTP: no workers, no engine, no API surface
    f"{S}.peers": (f"{S}.api", f"{S}.app", f"{S}.engine", f"{S}.pool"),
}


def _modules() -> list[tuple[str, Path]]:
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append((".".join((package, *parts)), path))
    return out


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_never_imports_upward(layer: str) -> None:
    wrong = []
    for module, path in _modules():
        if not _under(module, layer):
            continue
        for line, target in _imports(module, path):
            for banned in FORBIDDEN[layer]:
                if _under(target, banned):
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, f"{layer} must not import {FORBIDDEN[layer]}:\n" + "\n".join(wrong)


def test_every_module_is_covered_by_the_walk() -> None:
    """The walk sees the layers it checks (a renamed folder would make the rules vacuous)."""
    names = {module for module, _ in _modules()}
    for layer in FORBIDDEN:
        assert any(_under(name, layer) for name in names), layer
