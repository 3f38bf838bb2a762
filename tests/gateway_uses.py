"""The check behind tests/test_layers.py's rule that the gateway's services are one
typed object (``supervisor/gateway.py``), reached through its accessor: the places in
a module's source that use Starlette's untyped ``app.state`` bag instead.

Found, each as ``(line, what)``:

* a parameter or a field named ``state`` or ``app_state`` (or ``…_state``) annotated
  ``Any`` (a service locator passed down);
* ``getattr(…)`` on a state: ``getattr(state, …)``, ``getattr(app.state, …)``,
  ``getattr(request.app.state, …)`` (a service that may or may not exist);
* any use of an app's ``state`` (``app.state``, ``request.app.state``,
  ``scope["app"].state``): reading a service from the bag, or parking one on it.
"""

from __future__ import annotations

import ast


def _is_any(annotation: ast.expr | None) -> bool:
    """``Any``, ``Any | None``, ``typing.Any``, ``Optional[Any]``."""
    return annotation is not None and "Any" in {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(annotation)
        if isinstance(node, ast.Name | ast.Attribute)
    }


def _is_state_name(name: str) -> bool:
    return name == "state" or name.endswith("_state")


def _is_app(node: ast.expr) -> bool:
    """``app``, ``x.app``, ``scope["app"]``."""
    if isinstance(node, ast.Name):
        return node.id == "app"
    if isinstance(node, ast.Attribute):
        return node.attr == "app"
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "app"
    )


def _is_app_state(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "state" and _is_app(node.value)


def state_uses(source: str) -> list[tuple[int, str]]:
    """The uses of the untyped state in ``source`` (see the module's docstring)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg) and _is_state_name(node.arg) and _is_any(node.annotation):
            found.append((node.lineno, f"{node.arg}: Any"))
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and _is_state_name(node.target.id)
            and _is_any(node.annotation)
        ):
            found.append((node.lineno, f"{node.target.id}: Any"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and node.args
            and (
                (isinstance(node.args[0], ast.Name) and _is_state_name(node.args[0].id))
                or _is_app_state(node.args[0])
            )
        ):
            found.append((node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, …)"))
        elif _is_app_state(node):
            assert isinstance(node, ast.Attribute)
            found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))
