"""The check behind tests/test_layers.py's rule that a worker kind's classes are
composed, not cut in two across modules: the classes of one kind's modules whose base
is a class of another of them (an interface excepted)."""

from __future__ import annotations

import ast


def _is_interface(node: ast.ClassDef) -> bool:
    """A Protocol, an exception, or an ABC whose methods are all abstract (its body
    only annotations, docstrings and ``@abstractmethod`` stubs): a contract, no state."""
    bases = {ast.unparse(base).split("[")[0].rpartition(".")[2] for base in node.bases}
    if bases & {"Protocol", "Exception", "ValueError", "RuntimeError"}:
        return True
    if "ABC" not in bases:
        return False
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            if not any(ast.unparse(d).endswith("abstractmethod") for d in item.decorator_list):
                return False
        elif not isinstance(item, ast.AnnAssign | ast.Expr | ast.Pass):
            return False
    return True


def split_classes(sources: dict[str, str]) -> list[str]:
    """Classes of ``sources`` (module name → source, the modules of one kind) whose
    base is a class of another of these modules, unless that base is an interface;
    each as ``module:line Class(base)``."""
    trees = {module: ast.parse(source) for module, source in sources.items()}
    classes = {
        (module, node.name): node
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    wrong = []
    for module, tree in trees.items():
        names: dict[str, str] = {}  # a local name → the dotted name it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.asname or a.name: a.name for a in node.names if a.asname}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                spelled = ast.unparse(base).split("[")[0]
                head, dot, rest = spelled.partition(".")
                owner, _, name = (names.get(head, head) + dot + rest).rpartition(".")
                defined = classes.get((owner, name))
                if owner != module and defined is not None and not _is_interface(defined):
                    wrong.append(f"{module}:{node.lineno} {node.name}({spelled})")
    return wrong
