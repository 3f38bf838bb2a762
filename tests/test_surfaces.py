"""The text surfaces (chat completions, completions, the Responses API, Anthropic
Messages, Ollama's chat and generate, Realtime) are dialects over one serve
(``reply/serve.py`` and ``engine/ask.py``): none runs the engine's steps itself,
and each leans on a handful of lower modules. Checked on the source with ``ast``,
as :mod:`tests.test_layers` checks the import direction.
"""

from __future__ import annotations

import ast

from tests.test_layers import ROOT, S, _modules, _under

TEXT_SURFACES = ("chat", "completions", "responses", "anthropic", "ollama", "realtime")
"""The surfaces that speak to language models: each a dialect over the one serve."""
SURFACE_BUDGET = 14
TEXT_SURFACES_BUDGET = 60
GATEWAY = f"{S}.gateway"
"""The app's services and their accessor (``gateway_of``): what every route reaches
its registry and stores by, not a module below it (left out of the counts)."""


def surface_imports(surface: str) -> set[str]:
    """The distinct ``supervisor.*`` modules named in the ``from … import`` lines of
    ``api/<surface>/`` (its own folder left out)."""
    own = f"{S}.api.{surface}"
    named = set()
    for module, path in _modules():
        if not _under(module, own):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if _under(target, S) and not _under(target, own) and target != GATEWAY:
                named.add(target)
    return named


def test_each_text_surface_leans_on_few_lower_modules() -> None:
    """A text surface decodes its request, writes its dialect and names the serve:
    what it needs below it is a handful of modules, not the engine's insides."""
    counts = {surface: len(surface_imports(surface)) for surface in TEXT_SURFACES}
    over = {s: n for s, n in counts.items() if n > SURFACE_BUDGET}
    assert not over, f"surfaces over {SURFACE_BUDGET} lower modules: {over}"
    total = sum(counts.values())
    assert total <= TEXT_SURFACES_BUDGET, f"{total} lower modules in all: {counts}"


ENGINE_STEPS = ("check_turn", "sampling_params", "TurnRequest")
"""What the one serve (``reply/serve.py``, ``engine/ask.py``) does for every surface."""


def _is_step(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ENGINE_STEPS
    if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return False
    if func.attr == "start":
        return func.value.id in ("Turn", "Generation")
    return func.attr in ENGINE_STEPS


def _engine_steps(tree: ast.AST) -> list[int]:
    """Lines that call one of :data:`ENGINE_STEPS` or ``Turn.start``/``Generation.start``."""
    return [
        node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_step(node.func)
    ]


def test_no_surface_runs_the_engine_by_hand() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in _modules()
        if _under(module, f"{S}.api")
        for line in _engine_steps(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not wrong, "engine steps under supervisor/api (the serve's job):\n" + "\n".join(wrong)


def test_the_engine_step_check_sees_one() -> None:
    assert _engine_steps(ast.parse("Turn.start(h, t, i)")) == [1]
    assert _engine_steps(ast.parse("x = sampling_params(req, config)")) == [1]
    assert _engine_steps(ast.parse("TurnRequest(messages=[])")) == [1]
    assert _engine_steps(ast.parse("task.start()")) == []
    assert len(surface_imports("chat")) > 0
