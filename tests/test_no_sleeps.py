"""No test synchronises by sleeping: a bare ``time.sleep`` / ``asyncio.sleep`` of more
than 0.1 s in tests/ is refused, checked on the source with ``ast``.

A test waits for the event itself (a worker's in-flight count, a log line, a file)
with the polling helpers of tests/waiting.py, the timeout only its failure bound; a
sleep inside a loop is such a poll. A fixed sleep that is not a wait (a fake's
simulated delay, a backoff or a TTL whose time is what the test measures, the moment
in which a test shows that nothing happens) says so on its line with a
``# not a wait: <why>`` comment.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LIMIT = 0.1
MARK = "# not a wait:"
HELPERS = {TESTS / "waiting.py"}


def _seconds(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    return None  # an expression: its value is not known here


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return (
            func.attr == "sleep"
            and isinstance(func.value, ast.Name)
            and (func.value.id in ("time", "asyncio", "trio", "anyio"))
        )
    return isinstance(func, ast.Name) and func.id == "sleep"


def bare_sleeps(path: Path) -> list[str]:
    """``path:line: call`` for each sleep of more than LIMIT seconds (or of an
    amount not written as a number) outside a loop and without the mark."""
    source = path.read_text()
    lines = source.splitlines()
    found: list[str] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                child_in_loop = False  # a loop around a definition does not poll in it
            else:
                child_in_loop = in_loop or isinstance(child, ast.While | ast.For | ast.AsyncFor)
            if isinstance(child, ast.Call) and _is_sleep(child) and child.args and not in_loop:
                seconds = _seconds(child.args[0])
                marked = any(
                    MARK in lines[n - 1]
                    for n in range(child.lineno, (child.end_lineno or child.lineno) + 1)
                )
                if (seconds is None or seconds > LIMIT) and not marked:
                    found.append(f"{path}:{child.lineno}: {ast.unparse(child)}")
            visit(child, child_in_loop)

    visit(ast.parse(source), False)
    return found


def test_no_test_waits_by_sleeping() -> None:
    found = [
        hit
        for path in sorted(TESTS.rglob("*.py"))
        if path not in HELPERS
        for hit in bare_sleeps(path)
    ]
    assert not found, (
        "wait for the event (tests/waiting.py: until), not for a time; a sleep that is"
        f" not a wait says why with '{MARK} …' on its line:\n" + "\n".join(found)
    )


def test_the_check_finds_a_bare_sleep(tmp_path: Path) -> None:
    """The check itself: a bare sleep is found; a poll, a short one and a marked one
    are not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import asyncio, time\n"
        "async def f():\n"
        "    await asyncio.sleep(1.0)\n"
        "    time.sleep(delay)\n"
        "    time.sleep(0.05)\n"
        "    while True:\n"
        "        time.sleep(0.5)\n"
        "    time.sleep(2)  # not a wait: the backoff under test\n"
    )
    assert [hit.split(": ", 1)[1] for hit in bare_sleeps(sample)] == [
        "asyncio.sleep(1.0)",
        "time.sleep(delay)",
    ]
