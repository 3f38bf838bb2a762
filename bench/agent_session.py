"""The agent's session that ``bench.agent`` replays: its system prompts, tools and
requests, as fixed text (see :mod:`bench.agent` for what it measures), and the count
of the tokens each prompt adds to what came before (the minimum to prefill)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

_VOCABULARY = (
    "parser header field token buffer offset length value record stream error check "
    "return list index split join strip line column file path module test case assert "
    "expect input output cache state update read write open close lock retry timeout "
    "config option default flag limit count size byte string number object array map "
    "key name type schema request response client server queue batch step loop call"
)
_WORDS = _VOCABULARY.split(" ")


def filler(tag: str, words: int) -> str:
    """``words`` words of deterministic text (code-review prose), the same for the
    same ``tag``: twelve to a line, numbered."""
    state = zlib.crc32(tag.encode()) or 1
    lines: list[str] = []
    line: list[str] = []
    for k in range(words):
        state = (state * 1103515245 + 12345) % 2**31
        line.append(_WORDS[(state >> 8) % len(_WORDS)])
        if len(line) == 12 or k == words - 1:
            lines.append(f"{len(lines) + 1}: {' '.join(line)}.")
            line = []
    return "\n".join(lines)


_TOOL_NAMES = (
    ("read_file", {"path": "string", "offset": "integer", "limit": "integer"}),
    ("write_file", {"path": "string", "content": "string"}),
    ("edit_file", {"path": "string", "old": "string", "new": "string"}),
    ("bash", {"command": "string", "timeout": "integer"}),
    ("grep", {"pattern": "string", "path": "string", "glob": "string"}),
    ("glob", {"pattern": "string", "path": "string"}),
    ("web_fetch", {"url": "string", "prompt": "string"}),
    ("todo_write", {"todos": "array"}),
    ("task", {"description": "string", "prompt": "string"}),
    ("ask_user", {"question": "string"}),
)


def make_tools(words: int) -> list[dict[str, Any]]:
    """Ten tool definitions, each described in about ``words`` words."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"The {name} tool. " + filler(f"tool {name}", words),
                "parameters": {
                    "type": "object",
                    "properties": {key: {"type": kind} for key, kind in params.items()},
                    "required": list(params)[:1],
                },
            },
        }
        for name, params in _TOOL_NAMES
    ]


def _system(content: str) -> dict[str, Any]:
    return {"role": "system", "content": content}


def _user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _assistant(text: str, *calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """An assistant message with ``(id, name, arguments)`` tool calls (arguments sent
    as a JSON string, as the OpenAI API has them)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in calls
        ]
    return message


TASK = (
    "The test suite fails in tests/test_parser.py since the last refactor of the header "
    "parser. Find the cause, fix it, and make sure every test passes."
)
COMPACTED = (
    "This session continues an earlier conversation that ran out of context. Summary of "
    "the work so far:\n"
)


@dataclass
class Request:
    label: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


Step = list[Request]
"""Requests sent at once (one, or the two subagents)."""


def session(main_system: str, sub_system: str, tools: list[dict[str, Any]]) -> list[Step]:
    """The agent's requests, in order."""
    steps: list[Step] = []
    main = [_system(main_system), _user(TASK)]

    def ask(label: str) -> None:
        steps.append([Request(label, list(main), tools)])

    ask("turn 1")
    main += [
        _assistant("I'll read the failing test first.", ("c1", "read_file", {"path": "t.py"})),
        _tool("c1", filler("tests/test_parser.py", 300)),
    ]
    ask("turn 2")
    main += [
        _assistant(
            "The test expects the old field order. Where is it parsed?",
            ("c2", "grep", {"pattern": "parse_header", "path": "src"}),
        ),
        _tool("c2", filler("grep parse_header", 150)),
    ]
    ask("turn 3")
    main += [
        _assistant("Reading the parser.", ("c3", "read_file", {"path": "src/parser.py"})),
        _tool("c3", filler("src/parser.py", 500)),
    ]
    ask("turn 4")
    subs = [
        [_system(sub_system), _user(f"Find every caller of {name} and say what it expects.")]
        for name in ("parse_header", "split_fields")
    ]
    steps.append([Request(f"subagent {i + 1}, turn 1", list(s), tools) for i, s in enumerate(subs)])
    for i, sub in enumerate(subs):
        sub += [
            _assistant("Searching.", (f"s{i}", "grep", {"pattern": f"caller {i}", "path": "."})),
            _tool(f"s{i}", filler(f"subagent {i} grep", 200)),
        ]
    steps.append([Request(f"subagent {i + 1}, turn 2", list(s), tools) for i, s in enumerate(subs)])
    main += [
        _assistant(
            "Two questions can be answered in parallel.",
            ("c4a", "task", {"description": "callers of parse_header"}),
            ("c4b", "task", {"description": "callers of split_fields"}),
        ),
        _tool("c4a", filler("subagent report 1", 120)),
        _tool("c4b", filler("subagent report 2", 120)),
    ]
    ask("turn 5")
    main += [
        _assistant(
            "The order changed in split_fields.",
            ("c5", "edit_file", {"path": "src/parser.py", "old": "a, b", "new": "b, a"}),
        ),
        _tool("c5", "The file was edited."),
    ]
    ask("turn 6")
    main += [
        _assistant("Running the tests.", ("c6", "bash", {"command": "pytest -q"})),
        _tool("c6", filler("pytest output", 400)),
    ]
    main = [_system(main_system), _user(COMPACTED + filler("summary", 350))]
    ask("turn 7 (compacted)")
    main += [
        _assistant("Checking the last failure.", ("c7", "bash", {"command": "pytest -q -x"})),
        _tool("c7", filler("pytest -x output", 200)),
        _user("Also add a line to the changelog."),
    ]
    ask("turn 8 (user)")
    main += [
        _assistant("Reading the changelog.", ("c8", "read_file", {"path": "CHANGELOG.md"})),
        _tool("c8", filler("CHANGELOG.md", 200)),
    ]
    ask("turn 9")
    main += [
        _assistant(
            "Adding the line.",
            ("c9", "edit_file", {"path": "CHANGELOG.md", "old": "", "new": "Fixed."}),
        ),
        _tool("c9", "The file was edited."),
    ]
    ask("turn 10")
    return steps


def opening_tokens(tokenizer: Any, system: str, tools: list[dict[str, Any]]) -> int:
    """Tokens of the system turn with its tools, up to the first user turn."""
    with_user = tokenizer.apply_chat_template(
        [_system(system), _user("x")], tools=tools, tokenize=True
    )
    user_only = tokenizer.apply_chat_template([_user("x")], tokenize=True)
    return len(with_user) - len(user_only)


def system_prompts(tokenizer: Any, target: int) -> tuple[str, str, list[dict[str, Any]]]:
    """The agent's and the subagents' system prompts and the tools, sized so that the
    agent's system turn with the tools takes about ``target`` tokens (a third of its
    words in the instructions, the rest in the tools' descriptions)."""

    def build(words: int) -> tuple[str, str, list[dict[str, Any]]]:
        tools = make_tools(max(4, words * 2 // 30))
        main = "You are a coding agent.\n" + filler("agent instructions", max(4, words // 3))
        sub = "You are a subagent.\n" + filler("subagent instructions", max(4, words // 3))
        return main, sub, tools

    low, high = 1, 64
    while opening_tokens(tokenizer, *build(high)[::2]) < target:
        low, high = high, high * 2
    while high - low > max(1, low // 200):
        middle = (low + high) // 2
        if opening_tokens(tokenizer, *build(middle)[::2]) < target:
            low = middle
        else:
            high = middle
    return build(high)


def render(tokenizer: Any, request: Request) -> list[int]:
    return list(
        tokenizer.apply_chat_template(
            request.messages, tools=request.tools, add_generation_prompt=True, tokenize=True
        )
    )


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def new_tokens(prompts: list[list[int]]) -> list[int]:
    """Each prompt's tokens that no earlier prompt began with (the minimum a server
    with a perfect prefix cache prefills; prompts sent together count in order)."""
    out = []
    for k, prompt in enumerate(prompts):
        shared = max((common_prefix(prompt, earlier) for earlier in prompts[:k]), default=0)
        out.append(len(prompt) - shared)
    return out
